"""What a GPU host without network needs to run scripts/gpu_check.sh (the GPU tests and
benchmarks/bench_gpu.py), in one folder to carry there (`runs/gpu_carry`, git-ignored): the
cp312 wheels it lacks (grain, array-record, portpicker, torchcodec 0.11.0, PyPI's CUDA 13
build; PyAV, which the tests' datasets are written with; pytest and what it needs), FFmpeg
5.1 with NVDEC (a tarball `scripts/build_ffmpeg_nvdec.sh` builds; `--ffmpeg`), and the
benchmark's datasets converted here. Then copy the checkout with `runs/gpu_carry` to the
GPU host and run the check there:

    python benchmarks/gpu_carry.py --ffmpeg ffmpeg-5.1.9-nvdec-minimal.tgz   # ~57 MiB
    bash scripts/gpu_check.sh                             # on the GPU host, in the checkout

What the host must have already (what the measured H200 host had): Python 3.12, torch
2.11+cu130, jax 0.11.2 with CUDA 13, numpy, orbax-checkpoint, pyarrow, xxhash,
opencv-python-headless, absl-py, CUDA 13's NPP and the driver's NVDEC library. The check
installs the carried wheels into a temporary folder, for the run only (README, "On a GPU
host", says how to install for training).
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

WHEELS = (
    "grain==0.2.18",
    "array-record==0.8.6",
    "portpicker",
    "torchcodec==0.11.0",
    # The GPU tests: PyAV writes their datasets (34 MiB, most of the carry), pytest runs them.
    "av==18.1.0",
    "pytest==9.2.0",
    "pluggy==1.7.0",
    "iniconfig==2.3.1",
    "packaging==26.4",
    "pygments==2.21.0",
    "pytest-timeout==2.4.0",
)
# Where the project's sessions keep the tarball (beside the repository); --ffmpeg elsewhere.
FFMPEG = REPO_ROOT.parent / "shared" / "gpu" / "ffmpeg-5.1.9-nvdec-minimal.tgz"
LIMIT_MB = 60  # this folder; the device tool carries 64 MiB in all, the working tree included
TOOL_LIMIT_MB = 64
# The episodes of each size converted for the GPU host (the whole datasets are 225 MB):
# 211-220 frames, 3-4 batches of 64 (the loader goes round them), under the carry limit
# with the wheels. Before PyAV was carried: small 0-7, policy 3-8, large 3-6 (42 MiB).
EPISODES = {"small": "5-8", "policy": "5-8", "large": "5-8"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "gpu_carry")
    p.add_argument("--sizes", nargs="+", default=list(EPISODES))
    p.add_argument("--hevc", nargs="*", default=["small"], help="sizes also converted to HEVC")
    p.add_argument("--cache", type=Path, default=None, help="benchmark datasets (runs/bench)")
    p.add_argument(
        "--ffmpeg", type=Path, default=FFMPEG,
        help="FFmpeg 5.1 with NVDEC, *-nvdec-minimal.tgz (scripts/build_ffmpeg_nvdec.sh)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if not args.ffmpeg.is_file() or not args.ffmpeg.name.endswith("-nvdec-minimal.tgz"):
        p.error(
            f"--ffmpeg {args.ffmpeg}: no such *-nvdec-minimal.tgz; build one with "
            "`bash scripts/build_ffmpeg_nvdec.sh ffmpeg-5.1.9-nvdec-minimal.tgz` (Debian, root)"
        )
    from benchmarks import bench_data
    from benchmarks.bench_gpu import SIZES

    wheels = args.out / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)  # one version of each: two stop the install
    wheels.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--python-version", "3.12",
         "--only-binary=:all:", "--no-deps", "-d", str(wheels), *WHEELS],
        check=True,
    )  # fmt: skip
    shutil.copy(args.ffmpeg, args.out / args.ffmpeg.name)
    data = args.out / "data"
    data.mkdir(exist_ok=True)
    for name in args.sizes:
        spec = bench_data.DatasetSpec(name, *SIZES[name])
        # Re-encoded: the sources are AV1 (lerobot's default), which the default conversion
        # copies and A100/H100/H200 NVDEC cannot decode.
        codecs = {"h264": {"video_codec": "h264"}} | (
            {"hevc": {"video_codec": "hevc"}} if name in args.hevc else {}
        )
        for codec, options in codecs.items():
            options = {**options, "episodes": EPISODES[name]}
            cache = args.cache or bench_data.DEFAULT_CACHE
            _, converted = bench_data.prepare(spec, cache, **options)
            target = data / f"{name}-{codec}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(converted, target)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 2**20
    tree = tree_mib()
    print(
        f"{args.out}: {size:.1f} MiB to carry, the working tree {tree:.1f} MiB "
        f"(the device tool carries {TOOL_LIMIT_MB} MiB in all)"
    )
    return 0 if size <= LIMIT_MB and size + tree <= TOOL_LIMIT_MB else 1


def tree_mib() -> float:
    """What travels besides the carry: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    )  # fmt: skip
    files = (REPO_ROOT / name for name in listed.stdout.decode().split("\0") if name)
    return sum(f.stat().st_size for f in files if f.is_file()) / 2**20


if __name__ == "__main__":
    raise SystemExit(main())
