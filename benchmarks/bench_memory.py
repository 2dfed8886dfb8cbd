"""Peak RSS per epoch, epochs 1 to 5: does the loader's memory stay flat?

    python benchmarks/bench_memory.py           # writes benchmarks/results_memory.json

Runs `make_loader(..., num_epochs=5)` over the first episodes of the small benchmark
dataset (about 3,000 frames, so that an epoch takes seconds) with the benchmark's windows, batch size and worker count,
consumes every batch, and samples the RSS of the whole process tree (this process and the
Grain workers) every 0.1 s. Reports the peak and the last RSS of each epoch; the target is
epoch 5's peak within 10% of epoch 1's. Runs in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import bench_data  # noqa: E402
from benchmarks.bench_data import specs_for  # noqa: E402

EPOCHS = 5
TOLERANCE = 0.10


def rss_per_epoch(
    path: str, episodes: list[int], num_workers: int, batch_size: int, epochs: int
) -> dict:
    """In this process: run `epochs` epochs, return peak/last RSS and wall time per epoch."""
    from jaxload.options import PipelineOptions
    from jaxload.pipeline.make_loader import make_loader
    from jaxload.tools import bench

    windows = bench.bench_windows(path)
    boundaries = []  # perf_counter time at which each epoch's last batch arrived
    with bench.RssSampler(interval_s=0.1) as rss:
        start = time.perf_counter()
        loader = make_loader(
            path,
            global_batch_size=batch_size,
            delta_timestamps=windows,
            episodes=episodes,
            num_epochs=epochs,
            options=PipelineOptions(num_workers=num_workers),
            host_index=0,
            host_count=1,
        )
        epoch_size, batches = loader.epoch_size, 0
        for _ in loader:
            batches += 1
            while len(boundaries) < min(loader.epoch, epochs):  # epoch of the next batch
                boundaries.append(time.perf_counter())
        loader.close()
    while len(boundaries) < epochs:  # the dropped incomplete last batch
        boundaries.append(time.perf_counter())
    rows, previous = [], start
    for e, end in enumerate(boundaries, 1):
        samples = [b for t, b in rss.timeline if previous <= t <= end]
        rows.append(
            {
                "epoch": e,
                "peak_rss_bytes": max(samples, default=0),
                "last_rss_bytes": samples[-1] if samples else 0,
                "seconds": end - previous,
            }
        )
        previous = end
    return {"epoch_size": epoch_size, "batches": batches, "epochs": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_memory.json"
    )
    parser.add_argument(
        "--frames", type=int, default=3000, help="first episodes of the small dataset up to this"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--quick", action="store_true", help="the tiny dataset of run.py --quick")
    args = parser.parse_args(argv)
    from jaxload.tools import bench

    spec = specs_for(args.quick)["small"]
    _, path = bench_data.prepare(spec, args.cache, workers=2)
    lengths = np.cumsum(spec.episode_lengths())
    episodes = list(range(int(np.searchsorted(lengths, args.frames)) + 1))[: spec.episodes]
    result = bench.in_fresh_process(
        rss_per_epoch, str(path), episodes, args.workers, args.batch_size, args.epochs
    )
    first, last = result["epochs"][0], result["epochs"][-1]
    growth = last["peak_rss_bytes"] / first["peak_rss_bytes"] - 1
    for row in result["epochs"]:
        print(
            f"epoch {row['epoch']}: peak RSS {row['peak_rss_bytes'] / 2**20:.0f} MB, "
            f"at its end {row['last_rss_bytes'] / 2**20:.0f} MB ({row['seconds']:.1f} s)"
        )
    print(
        f"epoch {last['epoch']} vs 1: {100 * growth:+.1f}% (target within {100 * TOLERANCE:.0f}%)"
    )
    doc = {
        "command": "python benchmarks/bench_memory.py " + " ".join(argv or sys.argv[1:]),
        "machine": bench.machine_info(),
        "dataset": str(path),
        "episodes": episodes,
        "num_workers": args.workers,
        "batch_size": args.batch_size,
        "growth_last_vs_first": growth,
        "within_target": abs(growth) <= TOLERANCE,
        **result,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
