"""What a cross-embodiment mixture costs: its samples/s against the weighted harmonic mean
of each of its datasets read alone, side by side in one run.

The four datasets of tests/support/embodiments.py (15 fps AV1 3x 96x128, 25 fps H.264
2x 224x224, 10 fps PNG `image` cameras 96x128 + 64x64, 30 fps AV1 480x640), their episodes
`--scale` times as many (40: 2,000-2,440 frames each, so that a batch's samples of one
dataset rarely share a GOP, as in datasets of real size), converted with the defaults. Every loader reads the same way:
`DatasetSource(path, cameras=...)` (a primary and a wrist camera), `delta_frames` of 16
actions and 2 states, `image_transforms=[Resize((64, 64))]`, global batch 32 (`--batch-size`), jaxload's
default workers and threads. The mixture takes `MixtureWeights(by="frames",
temperature=2)`; alone, dataset d reads r_d samples/s, so a mixture whose batches hold
share s_d of it would ideally read 1 / sum_d (s_d / r_d) samples/s (each sample costs what
it costs alone): the weighted harmonic mean. The five loaders alternate within each round
(the order rotating), and the ratio is taken per round, so both sides see the same machine.
On a machine shared with other work, wall-clock rates swing with its load; the same
ratio in CPU time per sample of this process (read threads included: the default on 2
cores is no worker processes) is printed beside it: sum_d s_d * cpu_d / cpu_mixture.
Last, the read stage alone (ReadBatch, synchronously in this thread) per configuration:
CPU per sample, and the decoders it opens per batch with what they cost.

    python benchmarks/bench_mixture.py [--rounds 7] [--batches 15] [--scale 40] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

BATCH = 32  # --batch-size
WINDOWS = {"action": range(16), "observation.state": [-1, 0]}


def prepare(scale: int, cache: Path) -> dict[str, Path]:
    """The four datasets, converted once under `cache` (reused while it exists)."""
    from tests.support.embodiments import SPECS, convert_embodiments, write_embodiments

    root = cache / f"embodiments_x{scale}"
    out = {name: root / "out" / name for name in SPECS}
    if all((p / "meta" / "info.json").exists() for p in out.values()):
        return out
    import shutil

    from benchmarks.bench_data import fast_frames, quiet_encoders

    shutil.rmtree(root, ignore_errors=True)
    quiet_encoders()
    with fast_frames():  # the factory's pixels, rendered faster
        sources = write_embodiments(root / "src", scale=scale)
    return convert_embodiments(sources, root / "out")


def loader_for(paths: dict[str, Path], names: list[str], batch_size: int = BATCH):
    import jaxload
    from jaxload.transforms import Resize
    from tests.support.embodiments import CAMERAS

    sources = [jaxload.DatasetSource(paths[n], cameras=CAMERAS[n]) for n in names]
    return jaxload.make_loader(
        sources if len(sources) > 1 else sources[0],
        global_batch_size=batch_size,
        seed=0,
        delta_frames=WINDOWS,
        image_transforms=[Resize((64, 64))],
        weights=jaxload.MixtureWeights(by="frames", temperature=2.0) if len(names) > 1 else None,
    )


def rate(
    paths: dict[str, Path], names: list[str], batches: int, batch_size: int
) -> tuple[float, float]:
    """(samples/s, CPU ms per sample of this process: its read threads included)."""
    with loader_for(paths, names, batch_size) as loader:
        for _ in range(3):  # warm-up: readers, decoders
            next(loader)
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(batches):
            next(loader)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        return batch_size * batches / wall, 1e3 * cpu / (batch_size * batches)


class _CountingBackend:
    """The current decode backend, counting decoder opens and their CPU time."""

    def __init__(self, inner):
        self.inner, self.opens, self.open_s = inner, 0, 0.0

    def open(self, mp4: bytes, device: str):
        started = time.process_time()
        try:
            return self.inner.open(mp4, device)
        finally:
            self.opens += 1
            self.open_s += time.process_time() - started


def read_path_cost(
    paths: dict[str, Path], names: list[str], batches: int, batch_size: int
) -> dict[str, float]:
    """The read stage alone, synchronously in this thread (no read threads, no prefetch):
    CPU ms per sample, decoders opened per batch and the CPU ms they cost per sample."""
    from jaxload.decode import backend

    with loader_for(paths, names, batch_size) as loader:
        read = loader.read_batch()  # the read stage at position 0
        for k in range(2):
            read.map(k)
        with backend.use(_CountingBackend(backend.current())) as counting:
            started = time.process_time()
            for k in range(2, 2 + batches):
                read.map(k)
            cpu = time.process_time() - started
    samples = batch_size * batches
    return {
        "cpu_ms_per_sample": 1e3 * cpu / samples,
        "decoder_opens_per_batch": counting.opens / batches,
        "decoder_open_ms_per_sample": 1e3 * counting.open_s / samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--scale", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=BATCH)
    parser.add_argument("--cache", type=Path, default=REPO_ROOT / "runs" / "bench")
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_mixture.json"
    )
    args = parser.parse_args()
    from tests.support.embodiments import SPECS

    paths = prepare(args.scale, args.cache)
    names = list(SPECS)
    with loader_for(paths, names, args.batch_size) as mixture:
        shares = [float(s) for s in mixture.spec.stream.mixture.shares]
        table = mixture.mixture_table()
    print(table, flush=True)
    configs = {"mixture": names, **{n: [n] for n in names}}
    rates: dict[str, list[float]] = {k: [] for k in configs}
    cpu: dict[str, list[float]] = {k: [] for k in configs}
    ratios, cpu_ratios = [], []
    for r in range(args.rounds):
        order = list(configs)[r % len(configs) :] + list(configs)[: r % len(configs)]
        for key in order:
            wall_rate, cpu_ms = rate(paths, configs[key], args.batches, args.batch_size)
            rates[key].append(wall_rate)
            cpu[key].append(cpu_ms)
        ideal = 1 / sum(s / rates[n][-1] for s, n in zip(shares, names, strict=True))
        ratios.append(rates["mixture"][-1] / ideal)
        # the same in CPU per sample: what each sample costs alone, weighted by its share
        ideal_cpu = sum(s * cpu[n][-1] for s, n in zip(shares, names, strict=True))
        cpu_ratios.append(ideal_cpu / cpu["mixture"][-1])
        print(
            f"round {r}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in rates.items())
            + f" samples/s; mixture / weighted harmonic mean {ratios[-1]:.3f} (samples/s), "
            f"{cpu_ratios[-1]:.3f} (CPU per sample)",
            flush=True,
        )  # fmt: skip
    # The read stage alone, in this thread: what a sample costs, and how much of it is
    # opening decoders (one per camera codec and size per batch, shared by fewer samples
    # of each dataset in a mixture).
    costs: dict[str, list[dict]] = {k: [] for k in configs}
    for _ in range(max(1, args.rounds // 2)):
        for key in configs:
            costs[key].append(read_path_cost(paths, configs[key], args.batches, args.batch_size))
    read_path = {k: {f: statistics.median(c[f] for c in v) for f in v[0]} for k, v in costs.items()}
    ideal_read = sum(
        s * read_path[n]["cpu_ms_per_sample"] for s, n in zip(shares, names, strict=True)
    )
    read_ratio = ideal_read / read_path["mixture"]["cpu_ms_per_sample"]
    for key, cost in read_path.items():
        print(
            f"read stage, {key}: {cost['cpu_ms_per_sample']:.3f} CPU ms per sample, "
            f"{cost['decoder_opens_per_batch']:.1f} decoders opened per batch "
            f"({cost['decoder_open_ms_per_sample']:.3f} ms per sample)"
        )
    print(f"read stage: weighted mean of the datasets alone / mixture = {read_ratio:.3f}")
    median = {k: statistics.median(v) for k, v in rates.items()}
    results = {
        "datasets": names,
        "scale": args.scale,
        "batch_size": args.batch_size,
        "shares": dict(zip(names, shares, strict=True)),
        "samples_per_s": median,
        "samples_per_s_all": rates,
        "cpu_ms_per_sample": {k: statistics.median(v) for k, v in cpu.items()},
        "ratio_per_round": ratios,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "cpu_ratio_per_round": cpu_ratios,
        "cpu_ratio_median": statistics.median(cpu_ratios),
        "read_stage": read_path,
        "read_stage_ratio": read_ratio,
        "load_average": os.getloadavg(),
        "table": table,
    }
    print(json.dumps({k: v for k, v in results.items() if k != "table"}, indent=2))
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
