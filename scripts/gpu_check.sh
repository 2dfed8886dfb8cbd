#!/usr/bin/env bash
# The project's one GPU command (#35). On a GPU host (`nvidia-smi -L` lists one):
#   1. where torchcodec does not import (a host without network), installs what
#      benchmarks/gpu_carry.py put in runs/gpu_carry: the cp312 wheels the host lacks
#      (torchcodec 0.11.0's CUDA 13 build, grain, array-record, PyAV, pytest, ...) and
#      FFmpeg 5.1 with NVDEC (scripts/build_ffmpeg_nvdec.sh), for this run only;
#   2. runs the GPU-relevant tests (GPU_TESTS) with pytest: OUT/tests.log;
#   3. runs benchmarks/bench_gpu.py once per size, each in its own process group with a
#      deadline (faulthandler dumps every stack at it; what the size left behind is killed
#      after GPU_GRACE more seconds, so one stuck size never holds up the next): the sizes'
#      output in OUT/bench_gpu.log, their results in OUT/results_gpu_<size>.json;
#   3b. profiles the devices' decode path per call on one carried size (profile_loader.py
#      --decode-device cuda: mp4 assembly, decoder creation, decode; #46): informational;
#   4. writes the figures to OUT/summary.json and OUT/summary.txt (benchmarks/gpu_summary.py).
# Without a GPU it dry-runs the same steps (CI: tests/tools/test_gpu_check.py), with no
# carry: the tests collected only, bench_gpu.py on CPU devices (`--device device --quick
# --tiny`, small size), the same files. About a minute on 2 cores.
#
#   bash scripts/gpu_check.sh                          # OUT defaults to runs/gpu_check
#   # for a GPU host without network, first, in a checkout with network:
#   python benchmarks/gpu_carry.py                     # runs/gpu_carry, ~57 MiB
#   # then copy the checkout with runs/gpu_carry there and run the line above
#
# Exit status 0 when the tests and every size were ok; the files are written either way.
# Settings (environment): PYTHON (default .venv/bin/python, else python3); GPU_CARRY
# (runs/gpu_carry); GPU_SIZES ("large small policy"; dry run: "small"; "" for none);
# GPU_SECONDS (timed loading per path, 8); GPU_DEADLINE (per size, 170 s); GPU_BUDGET (the
# whole run, 540 s: each size gets at most its share of what is left); GPU_FLAGS (more
# bench_gpu.py flags, e.g. "--skip-accuracy --skip-one-thread"); GPU_TESTS (pytest paths,
# "" for none); GPU_TEST_DEADLINE (150 s); GPU_GRACE (15 s); GPU_FFMPEG_ROOT (/opt: where
# the carried FFmpeg unpacks); GPU_CHECK_MODE (gpu or dry, instead of asking nvidia-smi);
# GPU_BENCH (the benchmark script: tests swap it); GPU_PROFILE (step 3b's size: "small" on a
# GPU, the carried dataset of it; "" for none, the dry run's default) and
# GPU_PROFILE_DEADLINE (60 s, reserved out of the budget when step 3b runs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
started=$SECONDS

OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/results_gpu_*.json "$OUT"/summary.json "$OUT"/summary.txt "$OUT"/tests.log \
  "$OUT"/bench_gpu.log
CARRY=${GPU_CARRY:-runs/gpu_carry}
WORK=$(mktemp -d)
cleanup() {
  rm -rf "$WORK"
}
trap cleanup EXIT

if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=python3
fi
if [ -n "${GPU_CHECK_MODE:-}" ]; then
  MODE=$GPU_CHECK_MODE
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  MODE=gpu
else
  MODE=dry
fi
GRACE=${GPU_GRACE:-15}
BENCH=${GPU_BENCH:-benchmarks/bench_gpu.py}
STEPS=$WORK/steps.jsonl
: >"$STEPS"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
echo "gpu_check: $MODE run with $PY; files in $OUT"

# --- 1. What a host without network lacks (GPU hosts only) -----------------------------
install_carry() {
  local site=$WORK/site root=${GPU_FFMPEG_ROOT:-/opt} wheels lib torch_lib
  if [ ! -d "$CARRY/wheels" ]; then
    echo "no carry at $CARRY (python benchmarks/gpu_carry.py makes one where there is network)"
    return 1
  fi
  # The carried wheels whose distribution is not installed, and torchcodec, which is
  # installed here only if it does not import (then the carried one goes first on the path).
  wheels=$("$PY" - "$CARRY"/wheels/*.whl <<'EOF'
import sys
from importlib import metadata

for wheel in sys.argv[1:]:
    name = wheel.rsplit("/", 1)[-1].split("-")[0]
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        print(wheel)
    else:
        if name == "torchcodec":
            print(wheel)
EOF
  )
  if [ -n "$wheels" ]; then
    # shellcheck disable=SC2086  # one wheel per word
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" $wheels ||
      return 1
    export PYTHONPATH=$site:$PYTHONPATH
  fi
  [ -w "$root" ] || root=$WORK
  tar xzf "$CARRY"/ffmpeg-*-nvdec-minimal.tgz -C "$root" || return 1
  lib=$(dirname "$(find "$root/jlff" -name 'libavcodec.so*' | head -n 1)")
  # torch's CUDA 13 libraries (torchcodec's core links libcudart.so.13, NPP) and the driver's.
  torch_lib=$("$PY" -c 'import nvidia; print(nvidia.__path__[0] + "/cu13/lib")' 2>/dev/null)
  LD_LIBRARY_PATH=$lib:/usr/local/nvidia/lib64:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
  GPU_CHECK_FFMPEG="carried: $(basename "$CARRY"/ffmpeg-*-nvdec-minimal.tgz) in $lib"
  export GPU_CHECK_FFMPEG
  echo "$(echo "$wheels" | grep -c .) wheels from $CARRY into $site, FFmpeg in $lib"
}

step() {  # one line of steps.jsonl: step, rc, seconds, limit, status, then "key": "value" pairs
  local name=$1 rc=$2 seconds=$3 limit=$4 status=$5 extra="" value
  shift 5
  while [ $# -ge 2 ]; do
    value=${2//\"/}
    extra+=", \"$1\": \"${value//\\/}\""
    shift 2
  done
  printf '{"step": "%s", "rc": %d, "seconds": %d, "limit": %d, "status": "%s"%s}\n' \
    "$name" "$rc" "$seconds" "$limit" "$status" "$extra" >>"$STEPS"
}

if [ "$MODE" = gpu ] && ! "$PY" -c 'import torchcodec.decoders' >/dev/null 2>&1; then
  began=$SECONDS
  install_carry >"$WORK/install.log" 2>&1  # in this shell: it exports the paths
  rc=$?
  detail=$(tail -n 1 "$WORK/install.log")
  status=failed
  if [ "$rc" = 0 ]; then
    if "$PY" -c 'import torchcodec.decoders' >"$WORK/import.log" 2>&1; then
      status=ok
    else
      detail="$detail; torchcodec still does not import: $(tail -n 1 "$WORK/import.log")"
    fi
  fi
  echo "gpu_check: install: $status: $detail"
  step install "$rc" $((SECONDS - began)) 0 "$status" detail "$detail"
fi

# --- A step with a deadline, in its own process group ----------------------------------
# Its output goes to a file, never a pipe: a child that outlives it (a Grain worker, a
# stuck decode thread) cannot hold the script up, and the group is killed when it ends.
run_step() {  # log limit command...: sets RC, TOOK, KILLED
  local log=$1 limit=$2 pid began=$SECONDS
  shift 2
  KILLED=""
  set -m
  "$@" </dev/null >"$log" 2>&1 &
  pid=$!
  set +m
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS - began >= limit + GRACE)); then
      KILLED=1
      kill -TERM -- "-$pid" 2>/dev/null
      sleep 2
      break
    fi
    sleep 1
  done
  kill -KILL -- "-$pid" 2>/dev/null  # whatever it left running
  wait "$pid"
  RC=$?
  TOOK=$((SECONDS - began))
}

status_of() {  # log: ok, deadline (faulthandler's or ours) or failed
  if [ "$RC" = 0 ] && [ -z "$KILLED" ]; then
    echo ok
  elif [ -n "$KILLED" ] || grep -q '^Timeout (' "$1"; then
    echo deadline
  else
    echo failed
  fi
}

# --- 2. The tests ---------------------------------------------------------------------
TESTS=${GPU_TESTS-tests/decode tests/placement/test_choice.py tests/placement/test_device.py}
TEST_DEADLINE=${GPU_TEST_DEADLINE:-150}
JUNIT=""
if [ -n "$TESTS" ]; then
  # shellcheck disable=SC2086  # paths, one a word
  if [ "$MODE" = gpu ]; then
    JUNIT=$WORK/junit.xml
    echo "gpu_check: tests ($TESTS), deadline $TEST_DEADLINE s"
    run_step "$OUT/tests.log" "$TEST_DEADLINE" timeout -s INT "$TEST_DEADLINE" \
      env XLA_PYTHON_CLIENT_PREALLOCATE=false "$PY" -m pytest -q -rfEs -p no:cacheprovider \
      --junitxml="$JUNIT" $TESTS
  else  # on CPU the suite runs them; here they are only collected
    echo "gpu_check: tests collected ($TESTS)"
    run_step "$OUT/tests.log" "$TEST_DEADLINE" "$PY" -m pytest -q --collect-only \
      -p no:cacheprovider $TESTS
  fi
  [ "$RC" = 124 ] && KILLED=1  # timeout's
  step tests "$RC" "$TOOK" "$TEST_DEADLINE" "$(status_of "$OUT/tests.log")"
  tail -n 5 "$OUT/tests.log"
fi

# --- 3. The benchmark, one process per size -------------------------------------------
if [ "$MODE" = gpu ]; then
  SIZES=${GPU_SIZES-large small policy}
  FLAGS=(--seconds "${GPU_SECONDS:-8}")
  [ -d "$CARRY/data" ] && FLAGS+=(--datasets "$CARRY/data" --hevc)
else
  SIZES=${GPU_SIZES-small}
  FLAGS=(--device device --quick --tiny)
fi
BUDGET=${GPU_BUDGET:-540}
# Step 3b's dataset: the carried one of this size on a GPU; none in a dry run unless asked.
if [ "$MODE" = gpu ]; then PROFILE=${GPU_PROFILE-small}; else PROFILE=${GPU_PROFILE-}; fi
PROFILE_DEADLINE=${GPU_PROFILE_DEADLINE:-60}
RESERVE=0
[ -n "$PROFILE" ] && RESERVE=$((PROFILE_DEADLINE + GRACE))
read -r -a sizes <<<"$SIZES"
left_sizes=${#sizes[@]}
for size in "${sizes[@]}"; do
  # At most its share of the budget left, keeping 20 s for the summary (and step 3b's).
  share=$(((BUDGET - RESERVE - (SECONDS - started) - 20) / left_sizes - GRACE))
  left_sizes=$((left_sizes - 1))
  if ((share < 30)); then
    echo "gpu_check: size $size skipped: ${share} s of the budget left for it"
    step size 0 0 "$share" skipped size "$size"
    continue
  fi
  deadline=$((share < ${GPU_DEADLINE:-170} ? share : ${GPU_DEADLINE:-170}))
  echo "gpu_check: size $size, deadline $deadline s"
  # shellcheck disable=SC2086  # GPU_FLAGS: flags, one a word
  run_step "$WORK/bench_$size.log" "$deadline" "$PY" "$BENCH" --sizes "$size" "${FLAGS[@]}" \
    --deadline "$deadline" --out "$OUT/results_gpu_$size.json" ${GPU_FLAGS:-}
  status=$(status_of "$WORK/bench_$size.log")
  step size "$RC" "$TOOK" "$deadline" "$status" size "$size"
  {
    echo "=== size $size: $status (exit status $RC) in $TOOK s, deadline $deadline s"
    cat "$WORK/bench_$size.log"
  } | tee -a "$OUT/bench_gpu.log"
done

# --- 3b. The devices' decode path per call (#46) -----------------------------------------
# benchmarks/profile_loader.py --decode-device: per batch and per call, the decode threads'
# time in mp4 assembly, decoder creation and decoding, and decoders created per 1,000
# batches: OUT/profile_device.log, OUT/results_profile_device.json. Informational: it does
# not decide the run's status.
if [ -n "$PROFILE" ]; then
  left=$((BUDGET - (SECONDS - started) - 20 - GRACE))
  limit=$((left < PROFILE_DEADLINE ? left : PROFILE_DEADLINE))
  if [ "$MODE" = gpu ]; then
    PFLAGS=(--dataset "$CARRY/data/$PROFILE-h264" --decode-device cuda --batches 40)
  else
    PFLAGS=(--quick --only "$PROFILE" --decode-device device --batches 4)
  fi
  if ((limit < 20)); then
    echo "gpu_check: decode-path profile skipped: ${limit} s of the budget left for it"
    step profile 0 0 "$limit" skipped
  else
    echo "gpu_check: decode-path profile ($PROFILE), deadline $limit s"
    run_step "$OUT/profile_device.log" "$limit" timeout -s INT "$limit" "$PY" \
      benchmarks/profile_loader.py "${PFLAGS[@]}" --out "$OUT/results_profile_device.json"
    [ "$RC" = 124 ] && KILLED=1  # timeout's
    step profile "$RC" "$TOOK" "$limit" "$(status_of "$OUT/profile_device.log")"
    tail -n 6 "$OUT/profile_device.log"
  fi
fi

# --- 4. The figures -------------------------------------------------------------------
"$PY" benchmarks/gpu_summary.py --out "$OUT" --mode "$MODE" --steps "$STEPS" \
  ${JUNIT:+--junit "$JUNIT"} --seconds $((SECONDS - started))
