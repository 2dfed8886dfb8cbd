#!/usr/bin/env bash
# Sets up everything jaxload needs on a fresh Debian machine: system FFmpeg (torchcodec's
# shared libraries) and a virtual environment in .venv with the project installed.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ldconfig -p | grep -q 'libavcodec\.so'; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends ffmpeg >/dev/null
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install -c constraints.txt "torch==2.13.0"
# torchcodec's 0.13 wheel is the CPU build that matches torch 2.13; it has no Python deps.
"${PIP[@]}" install --no-deps -c constraints.txt torchcodec
"${PIP[@]}" install -c constraints.txt -e ".[dev]"
# LeRobot itself, as the benchmark's reference and for the harness's tests.
bash scripts/install_lerobot.sh
