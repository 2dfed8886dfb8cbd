"""Throughput measurement: jaxload's loader, the decode limit, and the helpers both share.

What `jaxload bench` and `benchmarks/run.py` measure, on the same dataset, windows, batch
size and worker count:

* the loader (`measure_jaxload`): samples/s and video frames delivered/s in steady state
  (after a warm-up that drains every prefetch buffer), time to first batch (from
  `make_loader()` to the first batch in hand) and the peak RSS of the whole process tree,
  Grain worker processes included (`RssSampler`);
* the decode limit (`decode_limit`): torchcodec alone, making exactly the decoders the reader
  made for the samples the loader served (same compressed bytes, same frame indices; recorded
  by re-reading those batches with torchcodec's `VideoDecoder` wrapped), replayed in a tight
  loop on 1, 2 and 4 threads and on one process per core, the fastest kept;
* LeRobotDataset in a torch DataLoader lives in `jaxload.tools.bench.lerobot` (optional deps).

Example:
    >>> from jaxload.tools.bench import harness as bench
    >>> windows = bench.bench_windows("out/my_dataset")
    >>> result, served = bench.measure_jaxload("out/my_dataset", delta_timestamps=windows,
    ...                                        num_workers=2, batch_size=32, seconds=10)
    >>> limit = bench.decode_limit("out/my_dataset", windows, served)
    >>> result.samples_per_s / limit.samples_per_s   # share of the decode limit reached
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

Windows = dict[str, list[float]]

# Keys the benchmark windows use when a dataset has them (LeRobot's names).
ACTION_KEY = "action"
STATE_KEY = "observation.state"
ACTION_STEPS = 16
STATE_OFFSETS = (-2, -1, 0)  # two past state frames and the current one
FIRST_CAMERA_OFFSETS = (-1, 0)  # the first camera: previous and current frame
OTHER_CAMERA_OFFSETS = (0,)  # every other camera: the current frame


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
class DecodeLimit:
    """torchcodec decoding the served samples' frames exactly as the reader asked, nothing else."""

    samples_per_s: float
    frames_per_s: float  # video frames delivered per second at that rate
    samples: int
    calls: int  # torchcodec decoders made per pass
    frames_decoded: int  # frames asked of them (a frame wanted twice in a batch counts once)
    best: str  # the fastest set-up, e.g. "2 processes"
    seconds_by_setup: dict[str, float]  # one pass over all calls, per set-up
    cpu_ms_per_sample: float  # CPU time per sample of the fastest set-up

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- windows ---------------------------------------------------------------------------------


def bench_windows(dataset: Any) -> Windows:
    """The benchmark's `delta_timestamps` for a dataset (a path or an opened dataset).

    A 16-step action chunk, two past state frames plus the current one, two frames (previous
    and current) of the first camera and the current frame of every other camera; keys the
    dataset lacks are left out.

    Example:
        >>> bench_windows("out/my_dataset")["action"][:3]
        [0.0, 0.0333..., 0.0666...]
    """
    info = _info(dataset)
    fps = info.fps
    windows: Windows = {}
    if ACTION_KEY in info.features:
        windows[ACTION_KEY] = [k / fps for k in range(ACTION_STEPS)]
    if STATE_KEY in info.features:
        windows[STATE_KEY] = [k / fps for k in STATE_OFFSETS]
    for i, cam in enumerate(sorted(info.cameras)):
        offsets = FIRST_CAMERA_OFFSETS if i == 0 else OTHER_CAMERA_OFFSETS
        windows[cam] = [k / fps for k in offsets]
    return windows


def frames_per_sample(windows: Mapping[str, Sequence[float]], cameras: Iterable[str]) -> int:
    """Video frames one sample delivers: each camera's window length (1 when unwindowed)."""
    return sum(len(windows.get(cam, [0.0])) for cam in cameras)


def _info(dataset: Any) -> Any:
    from jaxload import format as fmt

    if isinstance(dataset, str | os.PathLike):
        return fmt.read_info(dataset)
    return dataset.info


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


# --- steady-state throughput -----------------------------------------------------------------


@dataclasses.dataclass
class _Timing:
    ttfb_s: float
    samples: int
    seconds: float
    warmup_batches: int
    window: tuple[float, float]  # perf_counter start and end of the measured window
    cpu_seconds: float | None = None  # CPU time of the process tree during the window
    cpu_main_seconds: float | None = None  # ... of which this (the consuming) process


def measure_iterator(
    make_iterator: Callable[[], Iterator[Any]],
    *,
    seconds: float,
    warmup_s: float,
    warmup_batches: int,
    batch_len: Callable[[Any], int],
    on_batch: Callable[[Any], None] | None = None,
) -> _Timing:
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
    return _Timing(
        first - start, samples, now - window_start, seen, (window_start, now), cpu, main_cpu
    )


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


def measure_jaxload(
    path: str | os.PathLike,
    *,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    num_workers: int | None = 2,
    batch_size: int = 32,
    seconds: float = 20.0,
    warmup_s: float = 5.0,
    seed: int = 0,
    loader_kwargs: Mapping[str, Any] | None = None,
) -> tuple[Throughput, list[np.ndarray]]:
    """jaxload's loader on `path`: steady-state throughput, time to first batch, peak RSS.

    `num_workers=None` measures the loader's own choice for this machine
    (`jaxload.pipeline.loader.split_cores`: worker processes and read threads).

    Returns the result and, per counted batch, the dataset positions it served (what
    `decode_limit` replays).

    Example:
        >>> result, served = measure_jaxload("out/ds", delta_timestamps=bench_windows("out/ds"))
        >>> print(f"{result.samples_per_s:.0f} samples/s, first batch {result.time_to_first_batch_s:.1f} s")
    """
    import jaxload
    from jaxload.pipeline.loader import make_loader, split_cores

    windows = dict(delta_timestamps) if delta_timestamps is not None else bench_windows(path)
    ds = jaxload.open(path)  # metadata only: frames per sample, index -> position
    per_sample = frames_per_sample(windows, ds.camera_keys)
    read_threads = 2
    if num_workers is None:
        num_workers, read_threads = split_cores(os.cpu_count() or 2)
    kwargs = {
        "read_threads": read_threads,
        "worker_buffer_size": 2,
        "prefetch": 2,
        **(loader_kwargs or {}),
    }
    buffered = num_workers * (kwargs["worker_buffer_size"] + 2 * kwargs["read_threads"])
    warmup_batches = buffered + kwargs["prefetch"] + 2
    served: list[np.ndarray] = []
    loaders = []

    def make() -> Iterator[Any]:
        loader = make_loader(
            path,
            global_batch_size=batch_size,
            seed=seed,
            delta_timestamps=windows,
            num_workers=num_workers,
            host_index=0,
            host_count=1,
            **kwargs,
        )
        loaders.append(loader)
        return loader

    def record(batch: Mapping[str, np.ndarray]) -> None:
        served.append(positions_of(ds, batch["episode_index"], batch["frame_index"]))

    with RssSampler() as rss:
        try:
            timing = measure_iterator(
                make,
                seconds=seconds,
                warmup_s=warmup_s,
                warmup_batches=warmup_batches,
                batch_len=lambda b: len(b["index"]),
                on_batch=record,
            )
        finally:
            for loader in loaders:
                loader.close()
    result = _throughput("jaxload", timing, per_sample, batch_size, num_workers, rss)
    result.details["loader_kwargs"] = kwargs
    return result, served


def positions_of(ds: Any, episode_index: np.ndarray, frame_index: np.ndarray) -> np.ndarray:
    """Dataset positions of (episode_index, frame_index) pairs of a jaxload dataset."""
    episode_index = np.asarray(episode_index, dtype=np.int64).reshape(-1)
    row = np.searchsorted(ds.episode_index, episode_index)
    return ds.episode_starts[row] + np.asarray(frame_index, dtype=np.int64).reshape(-1)


def _throughput(
    name: str,
    timing: _Timing,
    per_sample: int,
    batch_size: int,
    num_workers: int,
    rss: RssSampler | None,
) -> Throughput:
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


# --- the decode limit ------------------------------------------------------------------------


@dataclasses.dataclass
class DecodeCall:
    """One torchcodec decoder the reader made: its source, options and the calls made on it.

    Calling it replays exactly that: a new `VideoDecoder(source, **options)` and the same
    method calls (e.g. `get_frames_at(indices=[...])`), nothing else.
    """

    source: Any  # the bytes (or path) the decoder was made from
    options: dict[str, Any]
    methods: list[tuple[str, tuple, dict[str, Any]]] = dataclasses.field(default_factory=list)

    def __call__(self) -> list[Any]:
        """Replays the decoder; returns what each recorded method call returned."""
        from jaxload.decode.torchcodec_import import video_decoder_class

        decoder = video_decoder_class()(self.source, **self.options)
        return [getattr(decoder, name)(*args, **kwargs) for name, args, kwargs in self.methods]

    @property
    def frames(self) -> int:
        """Frames asked for by the recorded calls."""
        total = 0
        for _, args, kwargs in self.methods:
            indices = kwargs.get("indices", args[0] if args else [])
            total += len(indices) if isinstance(indices, Sequence | np.ndarray) else 1
        return total


class _RecordingDecoder:
    """Stands in for torchcodec's VideoDecoder while recording: a real decoder, logged."""

    def __init__(self, calls: list[DecodeCall], real: type, source: Any, **options: Any):
        if not isinstance(source, bytes | bytearray | memoryview | str | os.PathLike):
            raise TypeError(
                f"decode limit: the reader made a decoder from a {type(source).__name__}; "
                "only bytes and paths can be replayed"
            )
        self._decoder = real(source, **options)
        source = bytes(source) if isinstance(source, bytearray | memoryview) else source
        self._call = DecodeCall(source, dict(options))
        calls.append(self._call)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._decoder, name)
        if not callable(attr):
            return attr

        def method(*args: Any, **kwargs: Any) -> Any:
            self._call.methods.append((name, _plain(args), _plain(kwargs)))
            return attr(*args, **kwargs)

        return method

    def __getitem__(self, key: Any) -> Any:
        self._call.methods.append(("__getitem__", (key,), {}))
        return self._decoder[key]

    def __len__(self) -> int:
        return len(self._decoder)


def _plain(value: Any) -> Any:
    """Recorded arguments as plain Python/numpy values (lists copied, tensors to lists)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_plain(v) for v in value)
    if hasattr(value, "tolist") and not isinstance(value, np.generic):
        return value.tolist()
    return value


@contextlib.contextmanager
def patched(module_name: str, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """Replaces `module_name.name` by `wrap(original)` where it is defined and in every
    jaxload module holding it, for the duration.

    Covers both ways the reader may use it: a module-level import (the jaxload module's own
    binding) and an import inside a function (looked up in the defining module at call
    time). Everything is restored on exit.
    """
    import importlib
    import sys

    home = importlib.import_module(module_name)
    original = getattr(home, name)
    holders = [home] + [
        m
        for n, m in list(sys.modules.items())
        if n.startswith("jaxload") and m is not None and getattr(m, name, None) is original
    ]
    replacement = wrap(original)
    try:
        for module in holders:
            setattr(module, name, replacement)
        yield
    finally:
        for module in holders:
            setattr(module, name, original)


def record_decode_calls(ds: Any, batches: Iterable[np.ndarray]) -> list[DecodeCall]:
    """Every torchcodec decoder `ds.__getitems__` makes for each batch of positions.

    torchcodec's `VideoDecoder` is replaced by a recorder for the duration (see `patched`),
    so what is recorded is exactly what the reader asked torchcodec for (the compressed
    bytes, the frame indices), whatever its grouping of frames into decoders.
    """
    calls: list[DecodeCall] = []
    batches = list(batches)

    def recorder(real: type) -> Callable[..., _RecordingDecoder]:
        return lambda source, **options: _RecordingDecoder(calls, real, source, **options)

    with patched("torchcodec.decoders", "VideoDecoder", recorder):
        for positions in batches:
            ds.__getitems__([int(p) for p in positions])
    if batches and not calls:
        raise RuntimeError("decode limit: the reader made no torchcodec VideoDecoder")
    return calls


@dataclasses.dataclass(frozen=True)
class Pass:
    """One replay of the decode calls: wall seconds and the CPU seconds it used."""

    seconds: float
    cpu_seconds: float


def replay(calls: Sequence[DecodeCall], threads: int) -> Pass:
    """Runs every call once on `threads` threads (interleaved shares, one per thread)."""
    cpu = time.process_time()
    if threads <= 1:
        start = time.perf_counter()
        for call in calls:
            call()
        return Pass(time.perf_counter() - start, time.process_time() - cpu)
    shares = [calls[i::threads] for i in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def run(share: Sequence[DecodeCall]) -> None:
        barrier.wait()
        for call in share:
            call()

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(run, share) for share in shares]
        cpu = time.process_time()
        barrier.wait()
        start = time.perf_counter()
        for f in futures:
            f.result()
        return Pass(time.perf_counter() - start, time.process_time() - cpu)


def replay_processes(calls: Sequence[DecodeCall], processes: int, repeats: int = 1) -> Pass:
    """The fastest of `repeats` passes over the calls, shared by `processes` processes.

    Each spawned process gets its share of the calls (bytes included) up front and warms up
    on its first call; all start each pass together at a barrier, and a pass lasts until
    the last one is done. Threads cannot reach the machine's limit when the decode path
    holds the GIL for part of each call; processes can.
    """
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes + 1)
    workers, conns = [], []
    for i in range(processes):
        receive, send = ctx.Pipe(duplex=False)
        share = list(calls[i::processes])
        worker = ctx.Process(
            target=_replay_child, args=(share, barrier, send, repeats), daemon=True
        )
        worker.start()
        send.close()
        workers.append(worker)
        conns.append(receive)
    best = Pass(math.inf, math.inf)
    try:
        for _ in range(repeats):
            barrier.wait(timeout=600)
            start = time.perf_counter()
            cpu = sum(conn.recv() for conn in conns)
            elapsed = time.perf_counter() - start
            if elapsed < best.seconds:
                best = Pass(elapsed, cpu)
    finally:
        for worker in workers:
            worker.join(timeout=60)
    return best


def _replay_child(calls: list[DecodeCall], barrier: Any, conn: Any, repeats: int) -> None:
    if calls:
        calls[0]()  # warm-up: imports, codec initialisation
    for _ in range(repeats):
        barrier.wait(timeout=600)
        cpu = time.process_time()
        for call in calls:
            call()
        conn.send(time.process_time() - cpu)
    conn.close()


def decode_limit(
    path: str | os.PathLike,
    delta_timestamps: Mapping[str, Sequence[float]] | None,
    batches: Sequence[np.ndarray],
    *,
    threads: Sequence[int] = (1, 2, 4),
    processes: int | None = None,
    repeats: int = 2,
    pass_seconds: float = 5.0,
    min_batches: int = 8,
) -> DecodeLimit:
    """The decode limit for the samples in `batches` (positions, one array per served batch).

    Records the torchcodec decoders the reader makes for those batches (from then on the
    compressed bytes are in memory), then replays them `repeats` times on each of 1, 2, 4
    threads and on `processes` processes (default: one per core; 0 to skip), and keeps the
    fastest pass.
    Only the first batches are used: as many as one single-threaded pass decodes in about
    `pass_seconds` (estimated from the first batch), at least `min_batches` (when served).

    Example:
        >>> limit = decode_limit("out/ds", windows, served, threads=(1, 2, 4))
        >>> limit.samples_per_s, limit.best
    """
    import jaxload

    windows = dict(delta_timestamps) if delta_timestamps is not None else bench_windows(path)
    ds = jaxload.open(path, delta_timestamps=windows)
    batches = [np.asarray(b) for b in batches if len(b)]
    if not batches:
        raise ValueError("decode_limit needs at least one served sample")
    first = record_decode_calls(ds, batches[:1])
    replay(first, 1)  # warm caches and lazy initialisation
    per_batch = max(replay(first, 1).seconds, 1e-6)
    chosen = batches[: max(min_batches, int(pass_seconds / per_batch))]
    calls = first + record_decode_calls(ds, chosen[1:])
    samples = sum(len(b) for b in chosen)
    passes = {
        _plural(n, "thread"): min((replay(calls, n) for _ in range(repeats)), key=_wall)
        for n in threads
    }
    processes = (os.cpu_count() or 1) if processes is None else processes
    if processes > 0:
        passes[_plural(processes, "process")] = replay_processes(calls, processes, repeats)
    best = min(passes, key=lambda k: passes[k].seconds)
    rate = samples / passes[best].seconds
    per_sample = frames_per_sample(windows, ds.camera_keys)
    return DecodeLimit(
        samples_per_s=rate,
        frames_per_s=rate * per_sample,
        samples=samples,
        calls=len(calls),
        frames_decoded=sum(c.frames for c in calls),
        best=best,
        seconds_by_setup={k: p.seconds for k, p in passes.items()},
        cpu_ms_per_sample=1000 * passes[best].cpu_seconds / samples,
    )


def _wall(p: Pass) -> float:
    return p.seconds


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


# --- running measurements in fresh processes -------------------------------------------------


def in_fresh_process(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Runs `fn(*args, **kwargs)` in a new spawned Python process and returns its result.

    Each measurement then starts from the same clean state (no modules, caches or memory
    left by the previous one), which keeps peak RSS and time to first batch comparable.
    `fn` must be importable (a module-level function); the process may start its own.
    """
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child_main, args=(child, fn, args, kwargs), daemon=False)
    process.start()
    child.close()
    try:
        ok, value = parent.recv()
    except EOFError:
        process.join()
        ok, value = False, f"the measurement process died (exit code {process.exitcode})"
    process.join()
    if not ok:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)} failed in its process:\n{value}")
    return value


def _child_main(conn: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    import traceback

    _mark_absl_flags_parsed()
    try:
        result = (True, fn(*args, **kwargs))
    except BaseException:
        result = (False, traceback.format_exc())
    conn.send(result)
    conn.close()


def _mark_absl_flags_parsed() -> None:
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


# --- one benchmark: jaxload, decode limit, LeRobot -------------------------------------------


@dataclasses.dataclass
class BenchReport:
    """Results for one dataset, all with the same windows, batch size and worker count."""

    dataset: str
    windows: Windows
    num_workers: int
    batch_size: int
    jaxload: Throughput
    decode_limit: DecodeLimit | None = None
    lerobot: Throughput | None = None
    lerobot_source: str | None = None
    label: str = ""
    machine: dict[str, Any] = dataclasses.field(default_factory=dict)
    # jaxload with the worker/thread counts it picks itself (split_cores), when measured
    jaxload_defaults: Throughput | None = None

    @property
    def vs_lerobot(self) -> float | None:
        """jaxload samples/s divided by LeRobotDataset + DataLoader samples/s."""
        if self.lerobot is None or self.lerobot.samples_per_s <= 0:
            return None
        return self.jaxload.samples_per_s / self.lerobot.samples_per_s

    @property
    def vs_decode_limit(self) -> float | None:
        """jaxload samples/s as a share of the decode limit."""
        if self.decode_limit is None or self.decode_limit.samples_per_s <= 0:
            return None
        return self.jaxload.samples_per_s / self.decode_limit.samples_per_s

    @property
    def defaults_vs_lerobot(self) -> float | None:
        """The same ratio for jaxload with its own worker/thread counts."""
        if self.jaxload_defaults is None or self.lerobot is None or self.lerobot.samples_per_s <= 0:
            return None
        return self.jaxload_defaults.samples_per_s / self.lerobot.samples_per_s

    @property
    def defaults_vs_decode_limit(self) -> float | None:
        if self.jaxload_defaults is None or self.decode_limit is None:
            return None
        return self.jaxload_defaults.samples_per_s / max(self.decode_limit.samples_per_s, 1e-9)

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "dataset": self.dataset,
            "lerobot_source": self.lerobot_source,
            "windows": self.windows,
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
            "jaxload": self.jaxload.to_json(),
            "jaxload_defaults": self.jaxload_defaults.to_json() if self.jaxload_defaults else None,
            "lerobot": self.lerobot.to_json() if self.lerobot else None,
            "decode_limit": self.decode_limit.to_json() if self.decode_limit else None,
            "ratios": {
                "jaxload/lerobot": self.vs_lerobot,
                "jaxload/decode_limit": self.vs_decode_limit,
                "jaxload_defaults/lerobot": self.defaults_vs_lerobot,
                "jaxload_defaults/decode_limit": self.defaults_vs_decode_limit,
            },
            "machine": self.machine,
        }


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
            from jaxload.tools.bench import lerobot as bench_lerobot

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


# --- output ----------------------------------------------------------------------------------


def format_table(reports: Sequence[BenchReport]) -> str:
    """A plain-text table: samples/s, frames/s, CPU per sample, start-up, memory, ratios."""
    header = (
        f"{'dataset':<8} {'pipeline':<26} {'samples/s':>9} {'frames/s':>9} "
        f"{'CPU ms/sample':>13} {'1st batch s':>11} {'peak RSS MB':>11}"
    )
    lines = [header, "-" * len(header)]
    for r in reports:
        name = r.label or Path(r.dataset).name
        rows = [(f"jaxload ({r.num_workers} workers)", r.jaxload)]
        if r.jaxload_defaults is not None:
            rows.append((f"jaxload ({_parallelism(r.jaxload_defaults)})", r.jaxload_defaults))
        if r.lerobot is not None:
            rows.append((f"LeRobot+DataLoader ({r.num_workers} w.)", r.lerobot))
        for title, t in rows:
            lines.append(
                f"{name:<8} {title:<26} {t.samples_per_s:>9.1f} {t.frames_per_s:>9.1f} "
                f"{_fmt(t.cpu_ms_per_sample, '.2f'):>13} "
                f"{_fmt(t.time_to_first_batch_s, '.2f'):>11} "
                f"{_fmt(_mb(t.peak_rss_bytes), '.0f'):>11}"
            )
        if r.decode_limit is not None:
            d = r.decode_limit
            lines.append(
                f"{name:<8} {'decode limit (' + d.best + ')':<26} {d.samples_per_s:>9.1f} "
                f"{d.frames_per_s:>9.1f} {d.cpu_ms_per_sample:>13.2f}"
            )
        ratios = _ratio_notes(r)
        if ratios:
            lines.append(f"{name:<8} jaxload ({r.num_workers} workers): {', '.join(ratios)}")
    return "\n".join(lines)


def _ratio_notes(r: BenchReport) -> list[str]:
    """The ratios measured for one dataset, as short phrases (table and chart)."""
    notes = []
    if r.vs_lerobot is not None:
        notes.append(f"{r.vs_lerobot:.2f}x LeRobot")
    if r.vs_decode_limit is not None:
        notes.append(f"{100 * r.vs_decode_limit:.0f}% of the decode limit")
    if r.defaults_vs_lerobot is not None:
        notes.append(f"its defaults {r.defaults_vs_lerobot:.2f}x LeRobot")
    if r.defaults_vs_decode_limit is not None:
        notes.append(f"{100 * r.defaults_vs_decode_limit:.0f}% of the limit")
    return notes


def _parallelism(t: Throughput) -> str:
    """ "W w., T thr.": the worker processes and read threads a jaxload run used."""
    threads = t.details.get("loader_kwargs", {}).get("read_threads", "?")
    return f"{t.num_workers} w., {threads} thr."


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _mb(n: int | None) -> float | None:
    return None if n is None else n / 2**20


def write_json(reports: Sequence[BenchReport], path: str | os.PathLike, **extra: Any) -> None:
    """The reports (and any extra sections) as one JSON document."""
    doc = {"benchmarks": [r.to_json() for r in reports], **extra}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=2, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> list[BenchReport]:
    """The reports in a file written by `write_json` (e.g. to plot them again)."""
    doc = json.loads(Path(path).read_text())
    reports = []
    for b in doc["benchmarks"]:
        limit = dict(b["decode_limit"]) if b["decode_limit"] else None
        reports.append(
            BenchReport(
                dataset=b["dataset"],
                windows=b["windows"],
                num_workers=b["num_workers"],
                batch_size=b["batch_size"],
                jaxload=Throughput(**b["jaxload"]),
                decode_limit=DecodeLimit(**limit) if limit else None,
                lerobot=Throughput(**b["lerobot"]) if b["lerobot"] else None,
                jaxload_defaults=(
                    Throughput(**b["jaxload_defaults"]) if b.get("jaxload_defaults") else None
                ),
                lerobot_source=b["lerobot_source"],
                label=b["label"],
                machine=b["machine"],
            )
        )
    return reports


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def plot(reports: Sequence[BenchReport], path: str | os.PathLike) -> None:
    """Bar chart PNG: samples/s of jaxload, LeRobot and the decode limit, one panel per
    dataset (each with its own scale), ratios under each panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(reports), figsize=(1.5 + 3.8 * len(reports), 4.4), dpi=110)
    axes = np.atleast_1d(axes)
    w, b = reports[0].num_workers, reports[0].batch_size
    for ax, report in zip(axes, reports):
        bars = _bars(report)
        drawn = ax.bar(
            [t for t, _, _ in bars], [v for _, v, _ in bars], color=[c for *_, c in bars]
        )
        for bar, (_, v, _) in zip(drawn, bars):
            ax.annotate(
                f"{v:.0f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        extra = _ratio_notes(report)
        ax.set_title(report.label or Path(report.dataset).name, fontsize=10)
        ax.set_xlabel(f"jaxload ({w} workers): " + ", ".join(extra) if extra else "", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.margins(y=0.15)
    axes[0].set_ylabel("samples / s (steady state)")
    fig.suptitle(f"Training samples per second: batch {b}, same windows", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _bars(report: BenchReport) -> list[tuple[str, float, str]]:
    """(label, samples/s, colour) of each pipeline measured for one dataset."""
    w = report.num_workers
    bars = [(f"jaxload\n{w} workers", report.jaxload.samples_per_s, "#1f77b4")]
    if report.jaxload_defaults is not None:
        d = report.jaxload_defaults
        bars.append((f"jaxload\n{_parallelism(d)}", d.samples_per_s, "#aec7e8"))
    if report.lerobot is not None:
        bars.append((f"LeRobot\n{w} workers", report.lerobot.samples_per_s, "#ff7f0e"))
    if report.decode_limit is not None:
        bars.append(("decode\nlimit", report.decode_limit.samples_per_s, "#7f7f7f"))
    return bars
