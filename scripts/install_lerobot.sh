#!/usr/bin/env bash
# Installs LeRobot 0.4.4 into .venv for the benchmark's reference pipeline
# (LeRobotDataset + torch DataLoader, see jaxload/tools/bench/lerobot.py). Idempotent.
#
# lerobot and torchvision go in with --no-deps: lerobot 0.4.4's pins would replace the CPU
# torch that jaxload pins (constraints.txt), and PyPI's torchvision 0.28 wheel is a CUDA
# build that pulls CUDA torch. What lerobot's dataset code imports comes through jaxload's
# `bench` extra instead (datasets, pandas, pillow, accelerate, jsonlines, deepdiff,
# draccus 0.10, einops, termcolor). torchvision's compiled ops do not load next to CPU torch;
# jaxload.tools.bench.lerobot works around that before importing lerobot.
#
# Run after scripts/install.sh:  bash scripts/install_lerobot.sh
# CONSTRAINTS: the pip constraints (constraints.txt; on a GPU host install.sh passes its
# copy without the torch and torchcodec lines, which would replace the `gpu` extra's).
set -euo pipefail
cd "$(dirname "$0")/.."
CONSTRAINTS=${CONSTRAINTS:-constraints.txt}

if [ ! -x .venv/bin/python ]; then
  echo "install_lerobot.sh: no .venv here; run scripts/install.sh first" >&2
  exit 1
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install -c "$CONSTRAINTS" -e ".[bench]"
"${PIP[@]}" install --no-deps "lerobot==0.4.4" "torchvision==0.28.0"

if ! .venv/bin/python -c "from jaxload.tools.bench.lerobot import import_lerobot_dataset as f; f()"; then
  echo "install_lerobot.sh: lerobot is installed but does not import (see above); a module" \
    "it needs may be missing from the bench extra" >&2
  exit 1
fi
echo "lerobot 0.4.4 ready for: python benchmarks/run.py / jaxload bench --lerobot-source"
