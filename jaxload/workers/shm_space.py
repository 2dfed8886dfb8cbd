"""Whether /dev/shm can hold the batches a loader's worker processes hand over there.

Workers build each batch in shared-memory slots (`jaxload.workers.shared_batch`). On a
/dev/shm too small for the batches in flight (Docker's default is 64 MiB) or read-only,
workers failed with a raw ENOSPC/EROFS naming no path, or were killed by SIGBUS after half
a minute (tmpfs allocates a page on first write; a full one signals the writer). So:

- before any worker starts, `check_shared_memory` compares the space free there with what
  the batches in flight need at least, and refuses a read-only mount: a `SharedMemoryError`
  naming the mount, its free space, what a batch needs and the fix;
- every slot is allocated when it is made (`shared_batch._new_segment`: `posix_fallocate`),
  so a /dev/shm that fills up later is the same error in the worker, never SIGBUS.

    check_shared_memory(85 << 20, PipelineOptions(num_workers=4).resolve(), "/dev/shm")
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from jaxload.errors import SharedMemoryError

_statvfs = os.statvfs  # one place to read the file system's numbers (tests simulate it)


def batch_bytes(spec: Any) -> int:
    """Bytes of this host's batch as the readers build it (a `LoaderSpec`)."""
    row = sum(
        math.prod(shape) * np.dtype(dtype).itemsize
        for shape, dtype in spec.schema.element_spec.values()
    )
    return row * len(spec.rows)


def batches_in_flight(options: Any) -> int:
    """Batches at least in /dev/shm at once: each worker's buffered ones and the one it
    writes, the training process's prefetched ones and the one in use."""
    return options.num_workers * (options.worker_buffer_size + 1) + options.prefetch + 1


def check_shared_memory(batch_bytes: int, options: Any, shm_dir: str) -> None:
    """Raises a SharedMemoryError when `shm_dir` is read-only or has less free space than
    `batches_in_flight(options)` batches of `batch_bytes` (module docstring)."""
    if options.num_workers <= 0 or not os.path.isdir(shm_dir):
        return
    try:
        st = _statvfs(shm_dir)
    except OSError:
        return  # nothing to measure: the slots' own allocation still fails cleanly
    free, size = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    if st.f_flag & os.ST_RDONLY or not os.access(shm_dir, os.W_OK):
        raise SharedMemoryError(
            f"{shm_dir} ({_mount(shm_dir)}) is read-only, but the loader's worker processes "
            "hand their batches over through shared memory there. Mount it writable (a "
            "container: --ipc=private or --shm-size), or use num_workers=0 "
            "(PipelineOptions(num_workers=0): batches are read in this process)"
        )
    count = batches_in_flight(options)
    need = batch_bytes * count
    if need > free:
        raise SharedMemoryError(full_message(shm_dir, free, size, batch_bytes, need, options))


def no_room(shm_dir: str, size: int, error: OSError) -> SharedMemoryError:
    """The error of a slot of `size` bytes that `shm_dir` could not make or allocate."""
    try:
        st = os.statvfs(shm_dir)
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    except OSError:
        free = total = 0
    message = full_message(shm_dir, free, total, size, size)
    return SharedMemoryError(f"{message} ({type(error).__name__}: {error})")


def full_message(
    shm_dir: str, free: int, size: int, batch_bytes: int, need: int, options: Any = None
) -> str:
    """What to say when `shm_dir` cannot hold `need` bytes."""
    counted = ""
    if options is not None:
        counted = (
            f" x {batches_in_flight(options)} in flight ({options.num_workers} workers x "
            f"(worker_buffer_size {options.worker_buffer_size} + 1) + prefetch "
            f"{options.prefetch} + 1)"
        )
    return (
        f"{shm_dir} ({_mount(shm_dir)}) has {_mib(free)} free of {_mib(size)}, but the "
        f"loader's worker processes hand their batches over there: a batch takes "
        f"{_mib(batch_bytes)}{counted} = {_mib(need)}. Give it more room (a container: "
        "docker run --shm-size=8g, or --ipc=host), or use fewer workers, a smaller prefetch "
        "or worker_buffer_size (PipelineOptions), or a smaller global_batch_size"
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _mount(path: str) -> str:
    """The file system mounted at or above `path` ("tmpfs at /dev/shm"), from /proc."""
    best = ("", "unknown file system")
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best[0]):
                    best = (point, f"{fields[2]} mounted at {point}")
    except OSError:
        pass
    return best[1]
