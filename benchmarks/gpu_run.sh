#!/usr/bin/env bash
# On a GPU host without network (../shared/gpu/README.md): installs what
# benchmarks/gpu_carry.py put in runs/gpu_carry, then runs benchmarks/bench_gpu.py on the
# carried datasets; results go to $OUT (the device tool brings them back). Nothing
# installed persists between runs, so installing and measuring are one script.
#
#   run(command="bash benchmarks/gpu_run.sh", carry=["runs/gpu_carry"], timeout_s=540)
#   GPU_SECONDS=8 bash benchmarks/gpu_run.sh     # shorter timed loading per path
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=runs/gpu_carry
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
started=$SECONDS

python3 -m pip install -q --no-index --no-deps --target /tmp/site "$CARRY"/wheels/*.whl
mkdir -p /opt && tar xzf "$CARRY"/ffmpeg-*-nvdec-minimal.tgz -C /opt
torch_lib=$(python3 -c 'import os, nvidia; print(os.path.join(os.path.dirname(nvidia.__path__[0]), "nvidia", "cu13", "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH=/opt/jlff/lib:/usr/local/nvidia/lib64:${torch_lib}:${LD_LIBRARY_PATH:-}
# The project from this tree: jaxload/converters is where the installed package maps
# converters/ (bench_gpu.py reads converted datasets only).
ln -sfn ../converters jaxload/converters
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  nproc
  python3 -c 'import torch, torchcodec, jax; print("torch", torch.__version__, "torchcodec", torchcodec.__version__, "jax", jax.__version__, jax.devices())'
} 2>&1 | tee "$OUT/machine.txt"

# One process per size, largest first, each with a deadline: a stall in one size dumps
# every thread's stack to the log and the next size still runs.
for size in ${GPU_SIZES:-large small policy}; do
  python3 benchmarks/bench_gpu.py --datasets "$CARRY/data" --hevc --sizes "$size" ${GPU_FLAGS:-} \
    --seconds "${GPU_SECONDS:-12}" --deadline "${GPU_DEADLINE:-170}" \
    --out "$OUT/results_gpu_$size.json" 2>&1 | tee -a "$OUT/bench_gpu.log" || true
done
echo "gpu_run: $((SECONDS - started)) s"
