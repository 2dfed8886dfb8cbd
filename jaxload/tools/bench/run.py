"""One benchmark: jaxload's loader, its decode limit and (optionally) LeRobotDataset on the
same dataset, windows, batch size and worker count, in alternating rounds.

What `jaxload bench` and `benchmarks/run.py` run:

* the loader (`jaxload.tools.bench.loader.measure_jaxload`): samples/s and video frames
  delivered/s in steady state (after a warm-up that drains every prefetch buffer), time to
  first batch (from `make_loader()` to the first batch in hand) and the peak RSS of the
  whole process tree, Grain worker processes included;
* the decode limit (`jaxload.tools.bench.limit.decode_limit`): torchcodec alone, decoding
  exactly what the reader decoded for the samples the loader served, replayed in a tight
  loop on 1, 2 and 4 threads and on one process per core, the fastest kept;
* LeRobotDataset in a torch DataLoader (`jaxload.tools.bench.lerobot`, optional deps).

Example:
    >>> report = run_bench("out/ds", lerobot_source="lerobot/ds", num_workers=2)
    >>> print(format_table([report]))
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.tools.bench import lerobot as bench_lerobot
from jaxload.tools.bench.isolate import in_fresh_process
from jaxload.tools.bench.limit import DecodeLimit, decode_limit
from jaxload.tools.bench.loader import measure_jaxload
from jaxload.tools.bench.measure import Throughput, machine_info
from jaxload.tools.bench.report import BenchReport
from jaxload.tools.bench.windows import bench_windows


def run_bench(
    path: str | os.PathLike,
    *,
    lerobot_source: str | os.PathLike | None = None,
    num_workers: int = 2,
    batch_size: int = 32,
    seconds: float = 20.0,
    warmup_s: float = 5.0,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    with_decode_limit: bool = True,
    repeats: int = 1,
    isolate: bool = True,
    label: str = "",
    with_defaults: bool = False,
    log: Callable[[str], None] = print,
) -> BenchReport:
    """jaxload, its decode limit and (with `lerobot_source`) LeRobotDataset, side by side.

    Measurements alternate (jaxload, LeRobot, jaxload, LeRobot, ... for `repeats` rounds) so
    that a change of load on a shared machine hits both; each figure reported is the median
    over the rounds (every round's samples/s is kept in `details["rounds"]`). With `isolate`
    each measurement runs in its own fresh process, one after another. The decode limit
    replays the samples of the first jaxload round, once per round; the fastest is kept.
    `with_defaults` adds, each round, jaxload with the worker and thread counts it picks
    itself for this machine.

    Example:
        >>> report = run_bench("out/ds", lerobot_source="lerobot/ds", num_workers=2)
        >>> print(format_table([report]))
    """
    windows = dict(delta_timestamps) if delta_timestamps is not None else bench_windows(path)
    call = in_fresh_process if isolate else _call
    common = dict(
        num_workers=num_workers, batch_size=batch_size, seconds=seconds, warmup_s=warmup_s
    )
    name = label or str(path)
    machine = machine_info()
    jax_runs: list[Throughput] = []
    default_runs: list[Throughput] = []
    lerobot_runs: list[Throughput] = []
    limits: list[DecodeLimit] = []
    served: list[np.ndarray] = []
    for round_ in range(repeats):
        log(
            f"[{name}] jaxload loader ({num_workers} workers, batch {batch_size}), round {round_ + 1}"
        )
        load = machine_info()["loadavg"]
        result, batches = call(measure_jaxload, path, delta_timestamps=windows, **common)
        result.details["loadavg_before"] = load
        jax_runs.append(result)
        served = served or batches
        if with_defaults:
            log(f"[{name}] jaxload loader (its own worker/thread counts), round {round_ + 1}")
            load = machine_info()["loadavg"]
            default, _ = call(
                measure_jaxload, path, delta_timestamps=windows, **{**common, "num_workers": None}
            )
            default.name = "jaxload (defaults)"
            default.details["loadavg_before"] = load
            default_runs.append(default)
        if lerobot_source is not None:
            log(f"[{name}] LeRobotDataset + DataLoader, round {round_ + 1}")
            load = machine_info()["loadavg"]
            reference = call(
                bench_lerobot.measure_lerobot, lerobot_source, delta_timestamps=windows, **common
            )
            reference.details["loadavg_before"] = load
            lerobot_runs.append(reference)
        if with_decode_limit:
            log(f"[{name}] decode limit, round {round_ + 1}")
            limits.append(call(decode_limit, path, windows, served))
    # The fastest round: the limit is what torchcodec alone can do here.
    limit = max(limits, key=lambda d: d.samples_per_s) if limits else None
    return BenchReport(
        dataset=str(path),
        windows=windows,
        num_workers=num_workers,
        batch_size=batch_size,
        jaxload=median_throughput(jax_runs),
        decode_limit=limit,
        lerobot=median_throughput(lerobot_runs) if lerobot_runs else None,
        lerobot_source=str(lerobot_source) if lerobot_source is not None else None,
        label=label,
        machine=machine,
        jaxload_defaults=median_throughput(default_runs) if default_runs else None,
    )


def median_throughput(runs: Sequence[Throughput]) -> Throughput:
    """One Throughput from several rounds: the median of each figure, peak RSS the max."""
    if len(runs) == 1:
        return runs[0]

    def med(values: Iterable[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return float(np.median(present)) if present else None

    first = runs[0]
    rss = [r.peak_rss_bytes for r in runs if r.peak_rss_bytes is not None]
    return dataclasses.replace(
        first,
        samples_per_s=med(r.samples_per_s for r in runs),
        frames_per_s=med(r.frames_per_s for r in runs),
        samples=sum(r.samples for r in runs),
        seconds=sum(r.seconds for r in runs),
        time_to_first_batch_s=med(r.time_to_first_batch_s for r in runs),
        peak_rss_bytes=max(rss) if rss else None,
        details={
            **first.details,
            "rounds": [
                {
                    "samples_per_s": r.samples_per_s,
                    "time_to_first_batch_s": r.time_to_first_batch_s,
                    "peak_rss_bytes": r.peak_rss_bytes,
                    "loadavg_before": r.details.get("loadavg_before"),
                }
                for r in runs
            ],
        },
    )


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)
