"""GOP length and codec: file size, fidelity and random-access decode cost.

    python benchmarks/bench_gop.py              # writes benchmarks/results_gop.json
    python benchmarks/bench_gop.py --large --gops 2 4 8 --codecs h264 \
        --out benchmarks/results_gop_large.json  # 480x640

Converts a 10-episode version of the small benchmark source (96x128, 2 AV1 cameras, the
same first 10 episodes: 2,280 frames) with
`--gop` in {1, 2, 4, 8, 16, 32} x `--video-codec` in {h264 (`--tune` fastdecode and
none), hevc} (default crf), and for
each conversion reports: output/source size ratio, PSNR min/mean against a decode of the
source (from the conversion report; min and mean over cameras), and the cost of random
access measured with the reader, single-threaded in this process, with the benchmark's
windows: wall and CPU ms per sample when samples are read in random batches of 32 (as the
loader reads them) and when read one at a time (best of 3 passes each).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import bench_data  # noqa: E402
from benchmarks.bench_data import LARGE, SMALL, specs_for  # noqa: E402

# Its own source, so that the size ratio compares with exactly the episodes converted.
SPEC = dataclasses.replace(SMALL, name="gop", episodes=10)
# --large: 480x640, 3 episodes (~1,000 frames) so that each conversion stays near a minute.
LARGE_SPEC = dataclasses.replace(LARGE, name="gop", episodes=3)
GOPS = (1, 2, 4, 8, 16, 32)
CODECS = ("h264", "hevc")
TUNES = ("fastdecode", "none")


def random_access_cost(
    path: Path, batch_size: int, batches: int, singles: int, rounds: int = 3, seed: int = 0
) -> dict[str, float]:
    """Wall and CPU ms per sample reading random samples, batched and one at a time.

    Each figure is the best of `rounds` passes over the same random positions: the minimum
    is the figure least disturbed by other load on a shared machine.
    """
    import jaxload
    from jaxload.tools import bench

    ds = jaxload.open(path, delta_timestamps=bench.bench_windows(path))
    rng = np.random.default_rng(seed)
    ds.__getitems__(rng.integers(0, len(ds), batch_size).tolist())  # warm-up
    positions = rng.integers(0, len(ds), (batches, batch_size)).tolist()
    one_by_one = rng.integers(0, len(ds), singles).tolist()

    def batched() -> None:
        for batch in positions:
            ds.__getitems__(batch)

    def single() -> None:
        for p in one_by_one:
            ds[p]

    out = {}
    for name, run, n in (("batched", batched, batches * batch_size), ("single", single, singles)):
        wall, cpu = [], []
        for _ in range(rounds):
            w, c = time.perf_counter(), time.process_time()
            run()
            wall.append(1000 * (time.perf_counter() - w) / n)
            cpu.append(1000 * (time.process_time() - c) / n)
        out[f"ms_per_sample_{name}"] = min(wall)
        out[f"cpu_ms_per_sample_{name}"] = min(cpu)
    return out


def measure(spec, cache: Path, codec: str, gop: int, tune: str, args) -> dict:
    _, path = bench_data.prepare(
        spec, cache, workers=args.workers, video_codec=codec, gop=gop, tune=_tune_arg(tune)
    )
    report = json.loads((path.parent / f"{path.name}.convert.json").read_text())
    psnr = report["psnr_db"]
    cost = random_access_cost(path, args.batch_size, args.batches, args.singles, args.rounds)
    return {
        "codec": codec,
        "gop": gop,
        "tune": tune,
        "size_ratio": report["size_ratio"],
        "output_bytes": report["output_bytes"],
        "psnr_min_db": min(v["min"] for v in psnr.values()),
        "psnr_mean_db": float(np.mean([v["mean"] for v in psnr.values()])),
        "convert_seconds": report["seconds"],
        **cost,
        "dataset": str(path),
    }


def format_table(rows: list[dict]) -> str:
    header = (
        f"{'codec':<5} {'tune':<10} {'gop':>3} {'size ratio':>10} {'PSNR min':>8} {'PSNR mean':>9} "
        f"{'batched ms/sample (CPU)':>23} {'single ms/sample (CPU)':>22}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        batched = f"{r['ms_per_sample_batched']:.2f} ({r['cpu_ms_per_sample_batched']:.2f})"
        single = f"{r['ms_per_sample_single']:.2f} ({r['cpu_ms_per_sample_single']:.2f})"
        lines.append(
            f"{r['codec']:<5} {r.get('tune', 'none'):<10} {r['gop']:>3} {r['size_ratio']:>10.2f} {r['psnr_min_db']:>8.2f} "
            f"{r['psnr_mean_db']:>9.2f} {batched:>23} {single:>22}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_gop.json")
    parser.add_argument("--gops", type=int, nargs="+", default=list(GOPS))
    parser.add_argument("--codecs", nargs="+", default=list(CODECS))
    parser.add_argument("--tunes", nargs="+", default=list(TUNES), choices=TUNES)
    parser.add_argument("--workers", type=int, default=2, help="conversion processes")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=16, help="random batches timed")
    parser.add_argument("--singles", type=int, default=200, help="single samples timed")
    parser.add_argument("--rounds", type=int, default=3, help="passes timed, best kept")
    parser.add_argument("--quick", action="store_true", help="the tiny dataset of run.py --quick")
    parser.add_argument(
        "--large", action="store_true", help="a 3-episode 480x640 source instead (~1,000 frames)"
    )
    args = parser.parse_args(argv)
    from jaxload.tools import bench

    spec = specs_for(args.quick)["small"] if args.quick else LARGE_SPEC if args.large else SPEC
    rows = []
    for codec in args.codecs:
        for tune in args.tunes if codec == "h264" else ["none"]:  # tune: x264 only
            for gop in args.gops:
                rows.append(measure(spec, args.cache, codec, gop, tune, args))
                print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    print(format_table(rows))
    doc = {
        "command": "python benchmarks/bench_gop.py " + " ".join(argv or sys.argv[1:]),
        "machine": bench.machine_info(),
        "source": spec.dirname,
        "frames": sum(spec.episode_lengths()),
        "batch_size": args.batch_size,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def _tune_arg(tune: str) -> str:
    return "" if tune == "none" else tune


if __name__ == "__main__":
    sys.exit(main())
