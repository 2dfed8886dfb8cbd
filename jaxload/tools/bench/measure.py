"""Measuring one pipeline: steady-state throughput, time to first batch, CPU time, peak RSS.

Whatever the pipeline (jaxload's loader in `jaxload.tools.bench.loader`, LeRobotDataset
in `jaxload.tools.bench.lerobot`), it is measured the same way: `measure_iterator` times
its batches while `RssSampler` samples the memory of the whole process tree, and
`throughput` turns both into a `Throughput`.

Example:
    >>> with RssSampler() as rss:
    ...     timing = measure_iterator(make, seconds=10, warmup_s=3, warmup_batches=8,
    ...                               batch_len=lambda b: len(b["index"]))
    >>> throughput("mine", timing, per_sample=3, batch_size=32, num_workers=2, rss=rss)
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class Throughput:
    """One pipeline's steady-state throughput and start-up cost."""

    name: str
    samples_per_s: float
    frames_per_s: float  # video frames delivered per second (samples/s x frames per sample)
    samples: int  # samples counted in the measured window
    seconds: float  # length of the measured window
    batch_size: int
    num_workers: int
    time_to_first_batch_s: float | None = None
    peak_rss_bytes: int | None = None
    cpu_ms_per_sample: float | None = None  # CPU time of all its processes per sample
    warmup_batches: int = 0
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Timing:
    """What `measure_iterator` saw: first batch, warm-up and the measured window."""

    ttfb_s: float
    samples: int
    seconds: float
    warmup_batches: int
    window: tuple[float, float]  # perf_counter start and end of the measured window
    cpu_seconds: float | None = None  # CPU time of the process tree during the window
    cpu_main_seconds: float | None = None  # ... of which this (the consuming) process


# --- steady-state throughput -----------------------------------------------------------------


def measure_iterator(
    make_iterator: Callable[[], Iterator[Any]],
    *,
    seconds: float,
    warmup_s: float,
    warmup_batches: int,
    batch_len: Callable[[Any], int],
    on_batch: Callable[[Any], None] | None = None,
) -> Timing:
    """Times an iterator of batches: first batch, warm-up, then a steady-state window.

    The clock starts before `make_iterator()`, so the time to first batch includes opening
    the dataset and starting worker processes. The warm-up lasts at least `warmup_s` and
    `warmup_batches` (enough to drain every prefetch buffer, so buffered batches never count
    as throughput); then batches are counted for `seconds`. `on_batch` sees each counted batch.
    """
    start = time.perf_counter()
    iterator = make_iterator()
    next(iterator)
    first = time.perf_counter()
    seen = 1
    now = first
    while seen < warmup_batches or now - first < warmup_s:
        next(iterator)
        seen, now = seen + 1, time.perf_counter()
    cpu_before = tree_cpu_seconds()
    window_start, samples = time.perf_counter(), 0
    now = window_start
    while now - window_start < seconds:
        batch = next(iterator)
        now = time.perf_counter()
        samples += batch_len(batch)
        if on_batch is not None:
            on_batch(batch)
    cpu_after = tree_cpu_seconds()
    cpu = cpu_delta(cpu_before, cpu_after)
    me = os.getpid()
    main_cpu = cpu_after.get(me, 0.0) - cpu_before.get(me, 0.0)
    return Timing(
        first - start, samples, now - window_start, seen, (window_start, now), cpu, main_cpu
    )


def throughput(
    name: str,
    timing: Timing,
    per_sample: int,
    batch_size: int,
    num_workers: int,
    rss: RssSampler | None,
) -> Throughput:
    """The `Throughput` of a measured pipeline: rates from `timing`, peak memory from `rss`.

    `per_sample` is the video frames one sample delivers (`frames_per_sample`).
    """
    rate = timing.samples / timing.seconds if timing.seconds > 0 else 0.0
    cpu_ms = (
        1000 * timing.cpu_seconds / timing.samples
        if timing.cpu_seconds and timing.samples
        else None
    )
    return Throughput(
        name=name,
        samples_per_s=rate,
        frames_per_s=rate * per_sample,
        samples=timing.samples,
        seconds=timing.seconds,
        batch_size=batch_size,
        num_workers=num_workers,
        time_to_first_batch_s=timing.ttfb_s,
        peak_rss_bytes=rss.peak_bytes if rss is not None else None,
        warmup_batches=timing.warmup_batches,
        cpu_ms_per_sample=cpu_ms,
        details={
            "frames_per_sample": per_sample,
            "main_process_cpu_ms_per_sample": (
                1000 * timing.cpu_main_seconds / timing.samples
                if timing.cpu_main_seconds is not None and timing.samples
                else None
            ),
            "machine_after": machine_info(),
        },
    )


# --- CPU time --------------------------------------------------------------------------------


def tree_cpu_seconds() -> dict[int, float]:
    """User + system CPU seconds of this process and each live descendant, by pid.

    CPU time per sample is much less sensitive than wall time to other load on a shared
    machine, so it is reported next to samples/s.
    """
    import psutil

    try:
        me = psutil.Process(os.getpid())
        members = [me, *me.children(recursive=True)]
    except psutil.Error:
        return {}
    out = {}
    for p in members:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[p.pid] = t.user + t.system
    return out


def cpu_delta(before: Mapping[int, float], after: Mapping[int, float]) -> float:
    """CPU seconds spent between two `tree_cpu_seconds` snapshots (new processes from 0)."""
    return sum(max(0.0, t - before.get(pid, 0.0)) for pid, t in after.items())


# --- resident memory -------------------------------------------------------------------------


class RssSampler:
    """Samples the resident memory of this process and all its descendants in a thread.

    RSS is summed over the processes, so pages shared between them (shared memory, the
    copy-on-write parts of forked children) count once per process: an upper bound.

    Example:
        >>> with RssSampler() as rss:
        ...     run_something()
        >>> rss.peak_bytes, rss.peak_between(t0, t1)
    """

    def __init__(self, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.timeline: list[tuple[float, int]] = []  # (perf_counter time, bytes)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        import psutil

        self._process = psutil.Process(os.getpid())
        self._sample()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        self.timeline.append((time.perf_counter(), tree_rss(self._process)))

    @property
    def peak_bytes(self) -> int:
        return max((b for _, b in self.timeline), default=0)

    def peak_between(self, start: float, end: float) -> int:
        """Peak RSS over the samples taken in [start, end] (perf_counter times)."""
        inside = [b for t, b in self.timeline if start <= t <= end]
        return max(inside, default=0)


def tree_rss(process: Any) -> int:
    """Sum of the RSS of a psutil process and its live descendants, in bytes."""
    import psutil

    total = 0
    try:
        members = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in members:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue  # exited between listing and reading
    return total


# --- the machine -----------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """CPU count, model and the load average now (the machine may be shared)."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    info = {"cpus": os.cpu_count(), "cpu_model": model, "loadavg": [round(x, 2) for x in load]}
    pressure = Path("/proc/pressure/cpu")
    if pressure.exists():  # share of time some task waited for a CPU (Linux PSI)
        fields = pressure.read_text().split("\n", 1)[0].split()[1:]
        info["cpu_pressure_some"] = {k: float(v) for k, v in (f.split("=") for f in fields)}
    return info
