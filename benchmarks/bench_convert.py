"""Conversion benchmark: throughput with 1 and 2 workers, and cost-aware work balance.

1. Throughput. One LeRobot v3.0 source (AV1, two cameras, generated and cached by
   benchmarks/bench_data.py) is converted with 1 and with 2 local workers, alternating,
   `--repeats` times each, in this one run; reported: input MB/s, episodes/s, frames/s
   (medians) and the 2-worker / 1-worker ratio, plus the realised balance of the
   2-worker runs (max / mean of the workers' busy seconds) and the cores the conversion
   kept busy (CPU seconds of the converter and its workers / wall seconds: on a shared
   machine this says how much of the machine the run actually got). The outputs must be
   byte-identical whatever the worker count.
2. Balance. For a dataset whose episode lengths run from 10 to 3000 frames (log-uniform,
   seeded), the converter's units (cost = frames x cameras x pixels) are handed to W
   workers costliest first (LPT) and, for comparison, round-robin (units in order, and
   single episodes in order); reported: max / mean of the per-worker cost for each.

Usage:
    python benchmarks/bench_convert.py                 # the figures in benchmarks/RESULTS.md
    python benchmarks/bench_convert.py --tiny          # seconds; what tests/tools/test_bench_convert.py runs
    python benchmarks/bench_convert.py --json out.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import bench_data  # noqa: E402
from jaxload.balance import imbalance  # noqa: E402
from jaxload.converters.convert import convert  # noqa: E402
from jaxload.converters.plan import balance, plan_units  # noqa: E402

BALANCE_WORKERS = (2, 4, 8, 16)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=24, help="episodes of the source")
    parser.add_argument("--max-length", type=int, default=300, help="longest episode (frames)")
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2, help="conversions per worker count")
    parser.add_argument("--balance-episodes", type=int, default=200)
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument("--tiny", action="store_true", help="a few seconds: for tests")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.tiny:
        args.episodes, args.max_length, args.height, args.width = 4, 20, 48, 64
        args.repeats, args.balance_episodes = 1, 50
    return args


def throughput(args: argparse.Namespace, log=print) -> dict[str, Any]:
    """Converts the source with 1 and 2 workers, alternating; medians per worker count."""
    spec = bench_data.DatasetSpec(
        "convert",
        height=args.height,
        width=args.width,
        episodes=args.episodes,
        min_length=10,
        max_length=args.max_length,
        cameras=2,
        codec="av1",
        episodes_per_video_file=4,
    )
    src = bench_data.write_source(spec, args.cache, log=log)
    load_before = os.getloadavg()[0]
    runs: dict[int, list] = {1: [], 2: []}
    digests = set()
    with tempfile.TemporaryDirectory(prefix="bench_convert_") as tmp:
        for repeat in range(args.repeats):
            for workers in (1, 2):
                out = Path(tmp) / f"w{workers}-{repeat}"
                cpu_before = _cpu_seconds()
                report = convert(src, out, workers=workers, progress=False)
                report.cpu_seconds = _cpu_seconds() - cpu_before
                runs[workers].append(report)
                digests.add(_tree_digest(out))
                log(
                    f"  {workers} worker(s): {report.seconds:.1f} s, "
                    f"{report.input_mb_per_s:.3f} MB/s in, {report.episodes_per_s:.2f} episodes/s, "
                    f"{report.cpu_seconds / report.seconds:.2f} cores busy"
                )
                shutil.rmtree(out)
    if len(digests) != 1:
        raise AssertionError("outputs differ between worker counts")
    result: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "source": src.name,
        "episodes": runs[1][0].episodes,
        "frames": runs[1][0].frames,
        "input_mb": runs[1][0].source_bytes / 2**20,
        "repeats": args.repeats,
    }
    for workers, reports in runs.items():
        result[f"workers_{workers}"] = {
            "seconds": statistics.median(r.seconds for r in reports),
            "input_mb_per_s": statistics.median(r.input_mb_per_s for r in reports),
            "episodes_per_s": statistics.median(r.episodes_per_s for r in reports),
            "frames_per_s": statistics.median(r.frames / r.seconds for r in reports),
            "cores_busy": statistics.median(r.cpu_seconds / r.seconds for r in reports),
        }
    result["speedup_2_over_1"] = (
        result["workers_2"]["input_mb_per_s"] / result["workers_1"]["input_mb_per_s"]
    )
    result["realized_balance_2_workers"] = statistics.median(r.realized_balance for r in runs[2])
    result["expected_balance_2_workers"] = runs[2][0].balance_lpt
    return result


def balance_table(episodes: int, pixels: int, seed: int = 0) -> dict[str, Any]:
    """LPT vs round-robin on episodes of 10..3000 frames (log-uniform)."""
    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.uniform(np.log(10), np.log(3000), size=episodes)).astype(int)
    lengths[0], lengths[-1] = 10, 3000
    units = plan_units(list(range(episodes)), lengths.tolist(), pixels)
    unit_costs = [u.cost for u in units]
    episode_costs = lengths.astype(float) * pixels
    rows = {}
    for workers in BALANCE_WORKERS:
        by_unit = balance(unit_costs, workers)
        rr_episodes = imbalance(episode_costs, np.arange(episodes) % workers, workers)
        rows[workers] = {
            "lpt_units": by_unit.lpt,
            "round_robin_units": by_unit.round_robin,
            "round_robin_episodes": rr_episodes,
        }
    return {
        "episodes": episodes,
        "frames": int(lengths.sum()),
        "min_length": int(lengths.min()),
        "max_length": int(lengths.max()),
        "units": len(units),
        "workers": rows,
    }


def format_results(results: dict[str, Any]) -> str:
    t, b = results["throughput"], results["balance"]
    w1, w2 = t["workers_1"], t["workers_2"]
    lines = [
        f"throughput: {t['source']} ({t['episodes']} episodes, {t['frames']} frames, "
        f"{t['input_mb']:.2f} MB in), median of {t['repeats']}; {t['cpus']} CPUs, "
        f"load average {t['load_average_before']:.1f} before",
        "| workers | seconds | input MB/s | episodes/s | frames/s | cores busy |",
        "|---|---|---|---|---|---|",
    ]
    for n, w in ((1, w1), (2, w2)):
        lines.append(
            f"| {n} | {w['seconds']:.1f} | {w['input_mb_per_s']:.3f} | "
            f"{w['episodes_per_s']:.2f} | {w['frames_per_s']:.0f} | {w['cores_busy']:.2f} |"
        )
    lines += [
        f"2 workers / 1 worker: x{t['speedup_2_over_1']:.2f} "
        f"(realised per-worker balance {t['realized_balance_2_workers']:.2f}, "
        f"planned {t['expected_balance_2_workers']:.2f})",
        "",
        f"balance: {b['episodes']} episodes of {b['min_length']}..{b['max_length']} frames "
        f"({b['frames']} frames) in {b['units']} units; max/mean per-worker cost",
        "| workers | LPT (units) | round-robin (units) | round-robin (episodes) |",
        "|---|---|---|---|",
    ]
    for workers, row in b["workers"].items():
        lines.append(
            f"| {workers} | {row['lpt_units']:.3f} | {row['round_robin_units']:.3f} | "
            f"{row['round_robin_episodes']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    bench_data.quiet_encoders()
    results = {
        "throughput": throughput(args),
        "balance": balance_table(args.balance_episodes, pixels=2 * args.height * args.width),
    }
    print(format_results(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return results


def _cpu_seconds() -> float:
    """CPU time of this process and its reaped children (the pool's workers)."""
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


if __name__ == "__main__":
    main()
