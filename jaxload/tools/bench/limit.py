"""The decode limit: torchcodec alone, decoding exactly what the reader decoded for the
samples the loader served, in a tight loop.

Recording: the served batches are read again with a recording decode backend installed
(`jaxload.decode.backend.use`), which keeps every mp4 the reader opens (same compressed
bytes), the device and the frame indices asked of it (`DecodeCall`). Replaying: each call
opens its mp4 with a fresh `TorchcodecBackend` and asks for the same frames, nothing
else, on 1, 2 and 4 threads and on one process per core; the fastest set-up is the limit.

Example:
    >>> result, served = measure_jaxload("out/ds", delta_timestamps=windows)
    >>> limit = decode_limit("out/ds", windows, served)
    >>> result.samples_per_s / limit.samples_per_s   # share of the decode limit reached
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from jaxload.decode import backend
from jaxload.decode.backend import OpenStream, TorchcodecBackend
from jaxload.tools.bench.windows import bench_windows, frames_per_sample


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


# --- recording -------------------------------------------------------------------------------


@dataclasses.dataclass
class DecodeCall:
    """One mp4 the reader opened through the decode backend, and the frames asked of it.

    Calling it replays exactly that: `TorchcodecBackend().open(mp4, device)` and the same
    `frames_at(indices)` calls, nothing else.
    """

    mp4: bytes  # init segment + the GOP fragments the batch needed
    device: str  # "cpu", "cuda:0", ...
    indices: list[list[int]] = dataclasses.field(default_factory=list)  # per frames_at call

    def __call__(self) -> list[Any]:
        """Replays the decode; returns the frames of each recorded `frames_at` call."""
        stream = TorchcodecBackend().open(self.mp4, self.device)
        return [stream.frames_at(indices) for indices in self.indices]

    @property
    def frames(self) -> int:
        """Frames asked for by the recorded calls."""
        return sum(len(indices) for indices in self.indices)


class _RecordingBackend(TorchcodecBackend):
    """Decodes as the default backend does, keeping a `DecodeCall` per opened mp4."""

    def __init__(self) -> None:
        self.calls: list[DecodeCall] = []

    def open(self, mp4: bytes, device: str) -> OpenStream:
        stream = super().open(mp4, device)
        call = DecodeCall(bytes(mp4), device)
        self.calls.append(call)
        return _RecordingStream(stream, call)


class _RecordingStream:
    def __init__(self, stream: OpenStream, call: DecodeCall):
        self._stream, self._call = stream, call

    def frames_at(self, indices: Sequence[int]) -> Any:
        self._call.indices.append([int(i) for i in indices])
        return self._stream.frames_at(indices)


def record_decode_calls(ds: Any, batches: Iterable[np.ndarray]) -> list[DecodeCall]:
    """Every mp4 `ds.__getitems__` decodes for each batch of positions, with its frames.

    A recording backend is installed for the duration (`jaxload.decode.backend.use`), so
    what is recorded is exactly what the reader asked the decoder for (the compressed
    bytes, the device, the frame indices), whatever its grouping of frames into decoders.
    """
    recorder = _RecordingBackend()
    batches = list(batches)
    with backend.use(recorder):
        for positions in batches:
            ds.__getitems__([int(p) for p in positions])
    if batches and not recorder.calls:
        raise RuntimeError("decode limit: the reader opened no mp4 through the decode backend")
    return recorder.calls


# --- replaying -------------------------------------------------------------------------------


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


# --- the limit -------------------------------------------------------------------------------


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

    Records the decodes the reader makes for those batches (from then on the compressed
    bytes are in memory), then replays them `repeats` times on each of 1, 2, 4 threads and
    on `processes` processes (default: one per core; 0 to skip), and keeps the fastest pass.
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
