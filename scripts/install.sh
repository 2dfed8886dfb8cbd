#!/usr/bin/env bash
# Sets up everything jaxload needs on a fresh Debian machine: system FFmpeg (torchcodec's
# shared libraries) and a virtual environment in .venv with the project installed.
# Idempotent: a second run only checks.
#
# PYTHON picks the interpreter: a command (python3.12), a version (3.12) or a path. Without
# it a new .venv gets Python 3.11 (3.12 on a GPU host) and an existing .venv keeps its own
# Python; with it, a .venv made by another Python version is recreated.
#
# On a GPU host (nvidia-smi lists one) it installs pyproject.toml's `gpu` extra, the set
# measured together (torch 2.11.0 and torchcodec 0.11.0, both CUDA 13 builds, jax 0.11.2
# with CUDA 13, which needs Python 3.12), with constraints.txt's other pins.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH=2.13.0  # as in constraints.txt: torchcodec 0.13 is built against exactly this torch
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
has_gpu() { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }
DEFAULT_PYTHON=3.11
if has_gpu; then DEFAULT_PYTHON=3.12; fi  # the `gpu` extra's jax 0.11.2 needs 3.12

if ! ldconfig -p | grep -q 'libavcodec\.so'; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends ffmpeg >/dev/null
fi

# --- The interpreter ------------------------------------------------------------------
py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

# Sets PY to an interpreter that runs and is the version asked for; TRIED says what was not.
# A command on PATH is not enough: pyenv's shims exist for every installed version but refuse
# ("command not found") when that version is not selected, so pyenv's own folders come next.
TRIED=()
find_python() {
  local want=$1 ver="" cmd="" cand prefix got
  local cands=()
  case $want in
    */*) cands=("$want") ;;
    [0-9]*.[0-9]*) ver=$want cmd=python$want ;;
    python[0-9]*.[0-9]*) ver=${want#python} cmd=$want ;;
    *) cmd=$want ;;
  esac
  if [ -n "$cmd" ]; then
    if cand=$(command -v "$cmd"); then cands+=("$cand"); else TRIED+=("$cmd (not on PATH)"); fi
  fi
  if [ -n "$ver" ]; then
    if command -v pyenv >/dev/null; then
      if prefix=$(pyenv prefix "$ver" 2>/dev/null); then
        cands+=("$prefix/bin/$cmd")
      else
        TRIED+=("pyenv prefix $ver (no such version)")
      fi
    fi
    for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$ver".*/bin/"$cmd" \
      /usr/local/bin/"$cmd" /usr/bin/"$cmd"; do
      if [ -e "$cand" ]; then cands+=("$cand"); else TRIED+=("$cand (absent)"); fi
    done
  fi
  for cand in "${cands[@]}"; do
    got=$(py_version "$cand" || true)
    if [ -z "$got" ]; then
      TRIED+=("$cand (does not run)")
    elif [ -n "$ver" ] && [ "$got" != "$ver" ]; then
      TRIED+=("$cand (Python $got)")
    else
      PY=$cand
      return 0
    fi
  done
  return 1
}

venv_version=""
[ -e .venv ] && venv_version=$(py_version .venv/bin/python || echo "none (broken)")

PY=""
if [ -n "${PYTHON:-}" ]; then
  if ! find_python "$PYTHON"; then
    echo "install.sh: PYTHON=$PYTHON: no working interpreter found. Tried:" >&2
    printf '  %s\n' "${TRIED[@]}" >&2
    echo "install.sh: set PYTHON to an interpreter's path, e.g. PYTHON=/usr/bin/python3.12" >&2
    exit 1
  fi
elif [ -n "$venv_version" ] && [ "$venv_version" != "none (broken)" ]; then
  [ "$venv_version" = "$DEFAULT_PYTHON" ] || echo "install.sh: keeping .venv's Python" \
    "$venv_version (PYTHON=$DEFAULT_PYTHON bash scripts/install.sh for the default)"
else
  # The default, Python 3.11 (what CI tests; 3.12 on a GPU host); failing that, python3.
  find_python "$DEFAULT_PYTHON" || find_python python3 || {
    echo "install.sh: no Python $DEFAULT_PYTHON or python3 found; set PYTHON. Tried:" >&2
    printf '  %s\n' "${TRIED[@]}" >&2
    exit 1
  }
fi

if [ -n "$PY" ]; then
  want_version=$(py_version "$PY")
  if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "install.sh: $PY is Python $want_version; jaxload needs 3.11 or newer" >&2
    exit 1
  fi
  if [ -n "$venv_version" ] && [ "$venv_version" != "$want_version" ]; then
    # A .venv of another Python would install wheels for the wrong version: start over.
    echo "install.sh: .venv is Python $venv_version, Python $want_version asked for ($PY):" \
      "recreating .venv"
    rm -rf .venv
  fi
  if [ ! -x .venv/bin/python ]; then
    echo "install.sh: creating .venv with $PY (Python $want_version)"
    "$PY" -m venv .venv || {
      echo "install.sh: '$PY -m venv' failed; on Debian, install python$want_version-venv" >&2
      exit 1
    }
  fi
fi

PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)

# --- torch ----------------------------------------------------------------------------
# PyPI's Linux torch is a CUDA build with several GB of CUDA libraries; without a GPU, a
# CPU build (about 0.7 GB installed) is wanted: first one pip already sees (this machine
# keeps one for Python 3.11), then PyTorch's CPU index; failing both, see below.
installed_torch=$(.venv/bin/python -c \
  'from importlib.metadata import version; print(version("torch"))' 2>/dev/null || true)

# PyPI's CUDA build without triton, cuSOLVER and cuda-bindings (about 1 GB that only GPU
# work loads). torch cannot even import without the CUDA libraries it links (about 2.5 GB),
# so those stay. Its metadata loses the three too, or the next pip run brings them back.
install_pypi_torch_for_cpu() {
  echo "install.sh: no CPU build of torch $TORCH for Python $(py_version .venv/bin/python)" \
    "within reach; installing PyPI's CUDA build without its GPU-only extras (about 4 GB)"
  "${PIP[@]}" install --no-deps -c constraints.txt "torch==$TORCH"
  local meta
  meta=$(echo .venv/lib/python*/site-packages/torch-"$TORCH".dist-info/METADATA)
  sed -i -E -e '/^Requires-Dist: (triton|cuda-bindings)[ =<>;]/d' \
    -e '/^Requires-Dist: cuda-toolkit\[/{s/cusolver,//;s/,nvtx\]/]/}' "$meta"
  "${PIP[@]}" install -c constraints.txt "torch==$TORCH"  # what the metadata still lists
}

if has_gpu; then
  # The `gpu` extra (pyproject.toml): PyPI's torch 2.11.0 and torchcodec 0.11.0 are CUDA 13
  # builds (PyPI's torchcodec 0.13 is CPU-only: no GPU decoding), jax[cuda13] 0.11.2.
  # constraints.txt's torch and torchcodec lines are the CPU set: every other pin holds.
  if ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
    echo "install.sh: the GPU set (jax 0.11.2) needs Python >= 3.12; .venv is Python" \
      "$(py_version .venv/bin/python): PYTHON=3.12 bash scripts/install.sh" >&2
    exit 1
  fi
  CONSTRAINTS=.venv/gpu-constraints.txt
  grep -v -E '^(torch|torchcodec)==' constraints.txt >"$CONSTRAINTS"
  "${PIP[@]}" install -c "$CONSTRAINTS" -e ".[dev,gpu]"
  .venv/bin/python -c 'import torchcodec.decoders' 2>/dev/null || echo "install.sh: torchcodec" \
    "does not load: its CUDA build needs FFmpeg 4-8 shared libraries and CUDA 13's NPP" \
    "(libnppicc.so.13) where the loader finds them (README, \"On a GPU host\")" >&2
else
  CONSTRAINTS=constraints.txt
  if [ "${installed_torch%%+*}" != "$TORCH" ]; then
    if "${PIP[@]}" install -c constraints.txt "torch==$TORCH+cpu" 2>/dev/null; then
      :
    elif .venv/bin/python -c "import urllib.request as u; u.urlopen('$TORCH_CPU_INDEX/torch/', timeout=10)" \
      2>/dev/null; then
      "${PIP[@]}" install -c constraints.txt "torch==$TORCH+cpu" --index-url "$TORCH_CPU_INDEX"
    else
      install_pypi_torch_for_cpu
    fi
  fi
  # torchcodec's 0.13 wheel is the CPU build that matches torch 2.13; it has no Python deps.
  "${PIP[@]}" install --no-deps -c constraints.txt torchcodec
  "${PIP[@]}" install -c constraints.txt -e ".[dev]"
fi
# LeRobot itself, as the benchmark's reference and for the harness's tests.
CONSTRAINTS=$CONSTRAINTS bash scripts/install_lerobot.sh
