"""Image cameras and fidelity targets: size, fidelity and decode speed per conversion mode.

Two measurements, side by side in one run:

1. `image`-dtype cameras (the shared fixture `../shared/data/lerobot/image_dtype`, PNG
   frames): converted with the default (4:4:4 H.264, crf chosen for 40 dB) and with
   `--video-codec lossless`; output bytes vs the PNG source, min PSNR, and samples/s of
   reading every frame in batches of 32 (both datasets read alternately, `--repeats`
   rounds, medians; the ratio is what counts on a shared machine).
2. Footage-like video (480x640, sensor noise, LeRobot's AV1 crf 30): crf 14 vs
   `--min-psnr 40`: chosen crf per camera, min PSNR, output bytes.

    python benchmarks/bench_fidelity.py [--repeats 5] [--out runs/bench_fidelity]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import jaxload  # noqa: E402
from jaxload import format as fmt  # noqa: E402
from jaxload.converters.convert import convert  # noqa: E402
from tests.support import lerobot_factory  # noqa: E402

FIXTURE = REPO_ROOT.parent / "shared" / "data" / "lerobot" / "image_dtype"
BATCH = 32


def tree_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def converted(src: Path, out: Path, **options) -> Path:
    if not out.exists():
        convert(src, out, workers=2, progress=False, **options)
    return out


def read_all(path: Path) -> float:
    """Seconds to read every frame of the dataset in batches of BATCH."""
    ds = jaxload.open(path)
    started = time.perf_counter()
    for first in range(0, len(ds), BATCH):
        ds.__getitems__(range(first, min(first + BATCH, len(ds))))
    return time.perf_counter() - started


def summary(path: Path) -> dict:
    info = fmt.read_info(path)
    fidelity = info.converter["fidelity_psnr_db"]
    return {
        "bytes": tree_bytes(path),
        "cameras": {
            k: {"codec": c.codec, "crf": c.crf, "psnr_min": fidelity[k]["min"]}
            for k, c in info.cameras.items()
        },
    }


def image_modes(out: Path, repeats: int) -> dict:
    modes = {
        "default": converted(FIXTURE, out / "image_default"),
        "lossless": converted(FIXTURE, out / "image_lossless", video_codec="lossless"),
    }
    frames = fmt.read_info(modes["default"]).total_frames
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    for path in modes.values():  # warm-up: imports, page cache
        read_all(path)
    for _ in range(repeats):
        for name, path in modes.items():
            seconds[name].append(read_all(path))
    result = {"source_bytes": tree_bytes(FIXTURE), "frames": frames}
    for name, path in modes.items():
        result[name] = summary(path) | {"samples_per_s": frames / statistics.median(seconds[name])}
    result["lossless_over_default_speed"] = (
        result["lossless"]["samples_per_s"] / result["default"]["samples_per_s"]
    )
    return result


def footage(out: Path) -> dict:
    src = out / "footage_src"
    if not src.exists():
        lerobot_factory.write_lerobot_v3(
            src,
            fps=30,
            episode_lengths=(40, 60, 50),
            cameras={"observation.images.top": (480, 640)},
            video_codec="av1",
            noise=8.0,
        )
    result = {"source_bytes": tree_bytes(src)}
    result["crf14"] = summary(converted(src, out / "footage_crf14", crf=14))
    result["min_psnr40"] = summary(converted(src, out / "footage_min40", min_psnr=40.0))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "bench_fidelity")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"image_dtype": image_modes(args.out, args.repeats), "footage": footage(args.out)}
    print(json.dumps(results, indent=2))
    (REPO_ROOT / "benchmarks" / "results_fidelity.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
