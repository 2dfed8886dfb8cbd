"""What a GPU host without network needs to run benchmarks/bench_gpu.py, in one folder to
carry there (`runs/gpu_carry`, git-ignored): the cp312 wheels it lacks (grain,
array-record, portpicker, torchcodec 0.11.0, PyPI's CUDA 13 build), FFmpeg 5.1 with NVDEC
(../shared/gpu/ffmpeg-5.1.9-nvdec-minimal.tgz), and the benchmark's datasets converted
here. Then, with the device tool:

    python benchmarks/gpu_carry.py                        # here, once (~46 MB)
    run(command="bash benchmarks/gpu_run.sh", carry=["runs/gpu_carry"], timeout_s=540)

The recipe is ../shared/gpu/README.md's (measured on an H200 host: Python 3.12, torch
2.11+cu130, jax 0.11.2 with CUDA; no grain, array-record, torchcodec or FFmpeg).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

WHEELS = ("grain==0.2.18", "array-record==0.8.6", "portpicker", "torchcodec==0.11.0")
FFMPEG = REPO_ROOT.parent / "shared" / "gpu" / "ffmpeg-5.1.9-nvdec-minimal.tgz"
LIMIT_MB = 60  # the device tool carries 64 MiB in all
# The episodes of each size converted for the GPU host (the whole datasets are 225 MB):
# enough batches for throughput and accuracy, under the carry limit with the wheels.
EPISODES = {"small": "0-7", "policy": "3-8", "large": "3-6"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "gpu_carry")
    p.add_argument("--sizes", nargs="+", default=list(EPISODES))
    p.add_argument("--hevc", nargs="*", default=["small"], help="sizes also converted to HEVC")
    args = p.parse_args(argv)
    from benchmarks import bench_data
    from benchmarks.bench_gpu import SIZES

    wheels = args.out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--python-version", "3.12",
         "--only-binary=:all:", "--no-deps", "-d", str(wheels), *WHEELS],
        check=True,
    )  # fmt: skip
    shutil.copy(FFMPEG, args.out / FFMPEG.name)
    data = args.out / "data"
    data.mkdir(exist_ok=True)
    for name in args.sizes:
        spec = bench_data.DatasetSpec(name, *SIZES[name])
        codecs = {"h264": {}} | ({"hevc": {"video_codec": "hevc"}} if name in args.hevc else {})
        for codec, options in codecs.items():
            options = {**options, "episodes": EPISODES[name]}
            _, converted = bench_data.prepare(spec, bench_data.DEFAULT_CACHE, **options)
            target = data / f"{name}-{codec}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(converted, target)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 2**20
    print(f"{args.out}: {size:.1f} MiB to carry (the device tool carries 64 MiB in all)")
    return 0 if size <= LIMIT_MB else 1


if __name__ == "__main__":
    raise SystemExit(main())
