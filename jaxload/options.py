"""How a loader runs (never what it yields): worker processes, read threads, buffers,
where video is decoded. Defaults come from the core count.

    options = jaxload.PipelineOptions(num_workers=4, read_threads=2, prefetch=4)
    loader = jaxload.make_loader("out/demo", global_batch_size=64, options=options)

Changing any of these changes speed and memory, never a batch's content or the loader's
state: a run saved with 2 workers restores with 8.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from typing import Any

from jaxload.placement.device import check_decode_device

# Cores one reader process keeps busy. Its threads decode outside the GIL but hold it for
# ~30% of each batch at 96x128 (reads, windows, building the mp4, collation; ~7% at
# 480x640), so threads beyond ~3 per process mostly wait (benchmarks/profile_loader.py).
CORES_PER_PROCESS = 3
MAX_WORKERS = 8
# A reader that delivers no batch for this long is stopped (or stuck on storage): the
# loader raises instead of blocking next() forever. Generous: a worker's first batch
# includes its start (importing jax and torch: ~5 s of CPU here).
DEFAULT_WORKER_TIMEOUT_S = 300.0
# Knobs that take integers, and the smallest value each accepts.
_MINIMUM = {
    "num_workers": 0,
    "read_threads": 1,
    "worker_buffer_size": 1,
    "prefetch": 1,
    "decode_threads": 1,
}


def split_cores(cores: int) -> tuple[int, int]:
    """(num_workers, read_threads) that keep `cores` cores reading and decoding.

    Up to CORES_PER_PROCESS cores: threads in the training process, no worker processes
    (on 2 cores they served as many samples/s as 2 workers at 96x128 and 34-37% more at
    480x640: no shared-memory page faults, no pickling, and a first batch 1.2-1.5 s
    sooner, without workers importing torch). Beyond that,
    ceil(cores / CORES_PER_PROCESS) workers (at most MAX_WORKERS) sharing the cores as
    read threads.
    """
    cores = max(1, int(cores))
    if cores <= CORES_PER_PROCESS:
        return 0, max(2, cores)
    workers = min(MAX_WORKERS, math.ceil(cores / CORES_PER_PROCESS))
    return workers, math.ceil(cores / workers)


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
    """Pipeline knobs; None means "choose from this machine" (see `resolve`).

    Attributes:
        num_workers: Grain worker processes; 0 reads in the training process.
        read_threads: read threads per process.
        worker_buffer_size: batches each worker keeps ready.
        prefetch: batches the final prefetch thread keeps ready.
        decode_device: "cpu" (in the readers), "cuda" (NVDEC in the training process, onto
            each row's GPU), "device" (any device torchcodec decodes on), or "auto" (where
            NVDEC can decode, the faster of "cpu" and "cuda", timed on the first batches).
        autotune: fill the knobs left None from measurements (`jaxload.autotune`).
        worker_timeout_s: seconds a worker process (or, without workers, the read threads)
            may take to deliver its next batch before next() raises
            `jaxload.errors.WorkerTimeoutError`; at least 4x the slowest batch seen so far
            (`jaxload.stages.watch_readers.WatchReaders`). A decode on a device gets as long.
        decode_threads: decodes in flight per device when the devices decode
            (decode_device "cuda" or "device"); None: the GPU's NVDEC engines (7
            on H100/H200, `jaxload.placement.machine.GpuInfo.nvdec_engines`), 2 on CPU
            devices (`jaxload.decode.on_device.DeviceDecoder`).
    """

    num_workers: int | None = None
    read_threads: int | None = None
    worker_buffer_size: int | None = None
    prefetch: int | None = None
    decode_device: str = "cpu"
    autotune: bool = False
    worker_timeout_s: float = DEFAULT_WORKER_TIMEOUT_S
    decode_threads: int | None = None

    def __post_init__(self) -> None:
        for name, low in _MINIMUM.items():
            value = getattr(self, name)
            if value is None:
                continue
            integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
            if not integral or value < low:
                raise ValueError(f"{name} must be an integer >= {low} (or None), got {value!r}")
            object.__setattr__(self, name, int(value))  # numpy's integers too, as `seed`
        timeout = self.worker_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
            raise ValueError(f"worker_timeout_s must be a number of seconds > 0, got {timeout!r}")
        check_decode_device(self.decode_device)

    @property
    def explicit(self) -> tuple[str, ...]:
        """The knobs the caller set (autotune keeps them); "cpu", the contract's default
        decode device, is not a choice."""
        names = [n for n in _MINIMUM if getattr(self, n) is not None]
        if self.decode_device != "cpu":
            names.append("decode_device")
        return tuple(sorted(names))

    def resolve(self, cores: int | None = None, remote: bool = False) -> PipelineOptions:
        """Every knob set: the ones left None from `split_cores` on this machine's cores.

        `remote`: a dataset is read from object storage, its cache in memory. Its readers
        wait for a record still in flight now and then, so each process gets one read
        thread more, which decodes meanwhile (2-core VM, 50 ms per request: +7% samples/s
        at 96x128 and at 180x320; the same extra thread cost local reads 4-5%, and remote
        reads through a disk cache 10%)."""
        kw: dict[str, Any] = {}
        extra = 1 if remote else 0
        if self.num_workers is None:
            workers, threads = split_cores(cores or os.cpu_count() or 2)
            kw["num_workers"] = workers
            if self.read_threads is None:
                kw["read_threads"] = threads + extra
        elif self.read_threads is None:
            kw["read_threads"] = 2 + extra
        if self.worker_buffer_size is None:
            kw["worker_buffer_size"] = 2
        if self.prefetch is None:
            kw["prefetch"] = 2
        return dataclasses.replace(self, **kw)
