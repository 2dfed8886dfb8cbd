"""Hybrid decoding without a GPU: the CPU workers beside a stand-in device of a known rate.

`decode_device="hybrid"` splits each batch's decode between the Grain workers (CPU) and
the devices. On an H200 host it served less than either side alone (benchmarks/RESULTS.md,
"GPU decoding"), and a GPU is not always at hand to find out why. Here the devices are CPU
devices whose decoder is `RatedDevice`: each decode thread (one NVDEC engine) takes
`frames / rate` seconds, asleep, so it costs the host no CPU, like NVDEC, and returns
blank frames. Everything else is the loader's own path: the readers decode their share in
the workers, the training process assembles each device's rows (the readers' and the
devices') and moves the split.

Each run, in this order, in one process: the CPU path (decode_device="cpu"), the stand-in
devices alone ("device"), hybrid at fixed shares (the split held still: the best of these
is what this machine can reach), and hybrid as it runs (the split moving). Printed: samples/s,
the main process's CPU per batch, hybrid over the best fixed share and over the sum of the
two sides alone.

    python benchmarks/bench_hybrid.py                       # 96x128, 1 worker, 2 threads x 1,500 frames/s
    python benchmarks/bench_hybrid.py --rate 1000 --shares 0.5 0.75 --seconds 10

The first run generates and converts the dataset (benchmarks/bench_data.py, about a minute
and a half on 2 cores; cached under runs/bench). The machine's other work moves every
figure: the stand-in device only sleeps, yet its path needs the training process's CPU
(reading the slots, assembling the rows), so on a busy 2-core machine it can lose 4x; run
6 s or more per path, several times, alternating with the tree you compare against.
Results go to benchmarks/results_hybrid.json (`--out` for another file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


class RatedDevice:
    """A decoder backend standing in for NVDEC: `rate` frames/s per decode thread, no CPU
    (it sleeps), blank (height, width) frames. Installed in the training process only: the
    workers keep decoding with torchcodec on the CPU."""

    def __init__(self, rate: float, height: int, width: int):
        self.rate, self.height, self.width = rate, height, width

    def open(self, mp4: bytes, device: str) -> RatedStream:
        return RatedStream(self)


class RatedStream:
    def __init__(self, device: RatedDevice):
        self.device = device

    def frames_at(self, indices):
        import torch

        n = len(indices)
        time.sleep(n / self.device.rate)
        return torch.zeros((n, self.device.height, self.device.width, 3), dtype=torch.uint8)


def run_path(dataset: Path, sharding, path: str, args, share: float | None = None) -> dict:
    """The loader on `path` for args.seconds (after 4 untimed batches); with `share`, hybrid
    with the split held at it."""
    import jax

    import jaxload
    from jaxload.pipeline import loader
    from jaxload.placement import split as decode_split

    held = share is not None
    if held:  # hold the split still: the share a run starts at, never moved
        saved = loader.INITIAL_SHARE, decode_split.SplitBalance.update
        loader.INITIAL_SHARE = share
        decode_split.SplitBalance.update = lambda self, wait, decode: self.split.share
    try:
        from benchmarks.bench_gpu import WINDOWS

        made = jaxload.make_loader(
            dataset,
            global_batch_size=args.batch_size,
            seed=3,
            sharding=sharding,
            delta_timestamps=WINDOWS,
            decode_device=path,
            options=jaxload.PipelineOptions(num_workers=args.workers, decode_threads=args.threads),
        )
        with made:
            for _ in range(4):
                jax.block_until_ready(next(made))
            cpu, began, batches = time.process_time(), time.perf_counter(), 0
            while time.perf_counter() - began < args.seconds:
                jax.block_until_ready(next(made))
                batches += 1
            wall, cpu = time.perf_counter() - began, time.process_time() - cpu
            split = made.decode_share
    finally:
        if held:
            loader.INITIAL_SHARE, decode_split.SplitBalance.update = saved
    return {
        "path": path if not held else f"hybrid@{share:g}",
        "samples_per_s": round(batches * args.batch_size / wall, 1),
        "main_cpu_ms_per_batch": round(1e3 * cpu / batches, 2),
        "share": split,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--size", default="small", help="small 96x128, policy 224x224, large 480x640")
    p.add_argument("--rate", type=float, default=1500.0, help="frames/s per decode thread")
    p.add_argument("--threads", type=int, default=2, help="decode threads (engines) per device")
    p.add_argument("--workers", type=int, default=1, help="Grain workers (the CPU side)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seconds", type=float, default=8.0, help="timed loading per path")
    p.add_argument(
        "--shares", type=float, nargs="*", default=[0.25, 0.5, 0.75],
        help="the readers' shares to hold the split at",
    )  # fmt: skip
    p.add_argument("--tiny", action="store_true", help="4 short episodes (a smoke test)")
    p.add_argument("--cache", type=Path, default=REPO_ROOT / "runs" / "bench")
    p.add_argument(
        "--out", type=Path, default=None,
        help="results file (default: benchmarks/results_hybrid.json; with --tiny, runs/bench/)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.out is None:  # a smoke run never overwrites the recorded figures
        args.out = (args.cache if args.tiny else REPO_ROOT / "benchmarks") / "results_hybrid.json"
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from benchmarks.bench_data import DatasetSpec, prepare
    from benchmarks.bench_gpu import SIZES, TINY
    from jaxload.decode import backend

    height, width, episodes = SIZES[args.size]
    extent = TINY if args.tiny else {"episodes": episodes}
    dataset = prepare(DatasetSpec(args.size, height, width, **extent), args.cache)[1]
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    runs = []
    with backend.use(RatedDevice(args.rate, height, width)):
        for path, share in [("cpu", None), ("device", None)]:
            runs.append(run_path(dataset, sharding, path, args, share))
            print(json.dumps(runs[-1]), flush=True)
        for share in args.shares:
            runs.append(run_path(dataset, sharding, "hybrid", args, share))
            print(json.dumps(runs[-1]), flush=True)
        runs.append(run_path(dataset, sharding, "hybrid", args))
        print(json.dumps(runs[-1]), flush=True)
    rate = {r["path"]: r["samples_per_s"] for r in runs}
    fixed = max((v for k, v in rate.items() if k.startswith("hybrid@")), default=0.0)
    summary = {
        "hybrid_over_sum": round(rate["hybrid"] / (rate["cpu"] + rate["device"]), 3),
        "best_fixed_over_sum": round(fixed / (rate["cpu"] + rate["device"]), 3),
        "hybrid_over_best_fixed": round(rate["hybrid"] / fixed, 3) if fixed else None,
        "hybrid_over_best_side": round(rate["hybrid"] / max(rate["cpu"], rate["device"]), 3),
    }
    print(
        f"\nstand-in device: {args.threads} decode threads x {args.rate:,.0f} frames/s, "
        f"{args.workers} worker(s), {args.size}, batch {args.batch_size}:"
    )
    for r in runs:
        share = "" if r["share"] is None else f", readers' share {r['share']:.2f}"
        print(
            f"  {r['path']:<12} {r['samples_per_s']:>8,.0f} samples/s, training process "
            f"{r['main_cpu_ms_per_batch']:.1f} ms CPU per batch{share}"
        )
    print(
        f"  hybrid / (cpu + device alone) = {summary['hybrid_over_sum']} (1.0: both sides' "
        f"limits added up); best held split / sum = {summary['best_fixed_over_sum']}; "
        f"hybrid / best held split = {summary['hybrid_over_best_fixed']} (how well the split "
        f"moves); hybrid / faster side alone = {summary['hybrid_over_best_side']}"
    )
    config = {k: v for k, v in vars(args).items() if k not in ("out", "cache")}
    record = {"config": config, "runs": runs, "summary": summary, "load": os.getloadavg()}
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
