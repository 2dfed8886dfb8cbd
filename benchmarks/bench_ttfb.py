"""Time to first batch on a 1,000-episode dataset.

    python benchmarks/bench_ttfb.py             # writes benchmarks/results_ttfb.json

The dataset: 1,000 episodes of 10..60 frames (seeded), one tiny AV1 camera (48x64) so
that generating it takes a couple of minutes, converted with the default settings. Each
measurement runs in a fresh Python process (imports not yet paid, as in a new training
job) and times `make_loader(...)` (opening the dataset: metadata, episode table, sampler)
and then the first `next()` (worker processes start, import, read and decode the first
batch), with the benchmark's windows and batch size, for the worker counts asked. Then the
same with torch, torchcodec and PyAV imported before the clock starts (what a training job
that already imported them, or a second loader, pays): the loader's own start-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import bench_data  # noqa: E402
from benchmarks.bench_data import DatasetSpec  # noqa: E402

SPEC = DatasetSpec(
    "ttfb",
    height=48,
    width=64,
    episodes=1000,
    min_length=10,
    max_length=60,
    cameras=1,
    episodes_per_video_file=100,
)
QUICK_SPEC = dataclasses.replace(SPEC, episodes=20, max_length=30)
TARGET_S = 2.0
# What a Grain worker process imports before it can read: the heavy parts, in order.
# "torchcodec" is imported the way jaxload does (`jaxload.decode.torchcodec_import`: without importing
# torch._dynamo); the plain `import torchcodec.decoders` is measured too, for comparison.
WORKER_IMPORTS = (
    "numpy",
    "jax",
    "grain",
    "torch",
    "torchcodec",
    "av",
    "jaxload.pipeline.make_loader",
)


def import_costs(names: tuple[str, ...] = WORKER_IMPORTS) -> dict[str, float]:
    """In this (fresh) process: seconds to import each of `names`, in order."""
    import importlib

    costs = {}
    for name in names:
        start = time.perf_counter()
        if name == "torchcodec":
            from jaxload.decode.torchcodec_import import video_decoder_class

            video_decoder_class()
        else:
            importlib.import_module(name)
        costs[name] = time.perf_counter() - start
    return costs


def time_first_batch(
    path: str, num_workers: int, batch_size: int, preimport: bool = False
) -> dict[str, float]:
    """In this (fresh) process: seconds for make_loader() and for the first next()
    (`preimport`: the decoding libraries imported before the clock starts)."""
    import jaxload.pipeline.make_loader
    from jaxload.tools import bench

    if preimport:
        import av  # noqa: F401

        from jaxload.decode.torchcodec_import import video_decoder_class

        video_decoder_class()

    windows = bench.bench_windows(path)
    start = time.perf_counter()
    loader = jaxload.pipeline.make_loader.make_loader(
        path,
        global_batch_size=batch_size,
        delta_timestamps=windows,
        options=jaxload.PipelineOptions(num_workers=num_workers),
        host_index=0,
        host_count=1,
    )
    made = time.perf_counter()
    next(loader)
    first = time.perf_counter()
    loader.close()
    return {"make_loader_s": made - start, "first_next_s": first - made, "total_s": first - start}


def measure(
    path: Path, workers: list[int], batch_size: int, repeats: int, preimport: bool = False
) -> list[dict]:
    """Median over `repeats` fresh processes, per worker count."""
    from jaxload.tools import bench

    rows = []
    for n in workers:
        runs = [
            bench.in_fresh_process(time_first_batch, str(path), n, batch_size, preimport)
            for _ in range(repeats)
        ]
        row = {"num_workers": n, "imports_paid_before": preimport, "runs": runs}
        for key in ("make_loader_s", "first_next_s", "total_s"):
            row[key] = statistics.median(r[key] for r in runs)
        rows.append(row)
        print(
            f"{n} workers{' (imports paid before)' if preimport else ''}: time to first batch {row['total_s']:.2f} s "
            f"(make_loader {row['make_loader_s']:.2f} s, first next() {row['first_next_s']:.2f} s)",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_ttfb.json")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20 episodes instead of 1,000")
    args = parser.parse_args(argv)
    from jaxload.tools import bench

    spec = QUICK_SPEC if args.quick else SPEC
    src, path = bench_data.prepare(spec, args.cache, workers=2)
    rows = measure(path, args.workers, args.batch_size, args.repeats)
    rows += measure(path, [0], args.batch_size, args.repeats, preimport=True)
    imports = bench.in_fresh_process(import_costs)
    plain = bench.in_fresh_process(import_costs, ("torch", "torchcodec.decoders"))
    print(
        "imports in a fresh process (what each worker pays): "
        + ", ".join(f"{k} {v:.2f} s" for k, v in imports.items())
    )
    doc = {
        "command": "python benchmarks/bench_ttfb.py " + " ".join(argv or sys.argv[1:]),
        "machine": bench.machine_info(),
        "dataset": {
            "spec": dataclasses.asdict(spec),
            "lengths": bench_data.summarize_lengths(spec.episode_lengths()),
            "path": str(path),
            "generation_seconds": bench_data.generation_seconds(src),
        },
        "batch_size": args.batch_size,
        "target_s": TARGET_S,
        "results": rows,
        "worker_import_seconds": imports,
        "plain_torchcodec_import_s": plain["torchcodec.decoders"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
