"""Batch arrays that Grain workers build in reused shared memory ("slots").

A batch's camera arrays are most of what a worker sends to the training process (85 MB
per batch of 32 at 480x640). In a fresh /dev/shm segment every page is allocated and
zeroed on first touch: writing 56 MB took 40 ms into a new segment and 3 ms into memory
already mapped (docs/LOADER.md). So each worker process keeps a pool of segments and
reuses them:

* worker: `SlotPool.array(shape, dtype)` returns an array in a free slot and the
  `SlotRef` (name, shape, dtype) that travels in its place, pickled by Grain (a few bytes);
  a slot's first byte says whether it is free. Slots are named
  `jaxload_<training process pid>_<random>`.
* training process: `SlotOpener.open(ref)` maps the segment the first time it sees it
  (and unlinks its name at once: the two mappings keep the memory alive, and the segment
  is not left behind even if its worker is killed) and returns a view. When the last view of
  that array is gone (jax arrays made from it included: they keep their numpy base
  alive), the slot is marked free and its worker writes the next batch there.

A slot is therefore never written while anything in the training process can still read
it. Arrays in slots a worker made but did not send (its batch transform replaced them, or
the batch failed) go back to its pool at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import mmap
import multiprocessing.util
import os
import secrets
import threading
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np

from jaxload.workers.shm_space import no_room

SHM_DIR = "/dev/shm"  # where POSIX shared memory lives on Linux
HEADER = 64  # bytes before the array: byte 0 is the slot's state; keeps the data aligned
FREE, IN_USE = 0, 1


def segment_prefix(training_pid: int | None = None) -> str:
    """The start of the names of the slots made for a training process (this one by
    default): `jaxload_<pid>_` says in /dev/shm whose they are."""
    return f"jaxload_{os.getpid() if training_pid is None else training_pid}_"


def _new_segment(size: int) -> shared_memory.SharedMemory:
    # A worker's parent is the training process; a pool in that process itself is its own.
    parent = multiprocessing.parent_process()
    prefix = segment_prefix(parent.pid if parent is not None else None)
    while True:
        try:
            segment = shared_memory.SharedMemory(prefix + secrets.token_hex(4), True, size)
        except FileExistsError:  # the same 32 random bits: draw again
            continue
        except OSError as e:  # read-only, full, no such directory
            raise no_room(SHM_DIR, size, e) from e
        break
    try:
        # Every page now: a /dev/shm that is full fails here, not with SIGBUS at first write.
        os.posix_fallocate(segment._fd, 0, size)
    except OSError as e:
        with contextlib.suppress(OSError):
            segment.close()
            segment.unlink()
        raise no_room(SHM_DIR, size, e) from e
    return segment


@dataclasses.dataclass(frozen=True)
class SlotRef:
    """What crosses from a worker to the training process instead of a slot's array."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclasses.dataclass(frozen=True)
class PackedBytes:
    """Byte strings laid end to end in one slot: what crosses instead of them. A batch's
    compressed GOPs (decoded on the devices) are megabytes, which Grain would otherwise
    pickle through its queue's pipe: a pipe its worker cannot exit past until the training
    process reads it."""

    ref: SlotRef
    ends: tuple[int, ...]  # where each string ends in the slot


def pack_bytes(chunks: list[Any], pool: SlotPool) -> PackedBytes:
    """`chunks` (bytes-like) copied end to end into a slot of `pool`."""
    ends = np.cumsum([len(c) for c in chunks], dtype=np.int64)
    array, ref = pool.array((int(ends[-1]) if len(ends) else 0,), np.uint8)
    try:
        start = 0
        for chunk, end in zip(chunks, ends.tolist(), strict=True):
            array[start:end] = np.frombuffer(chunk, np.uint8)
            start = end
    except BaseException:
        pool.release(ref)
        raise
    return PackedBytes(ref, tuple(ends.tolist()))


class SlotPool:
    """A worker process's shared-memory segments, reused once the trainer drops a batch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[int, list[shared_memory.SharedMemory]] = {}  # by array bytes
        self._closed = False  # set by unlink_all: the process is exiting

    def array(self, shape: tuple[int, ...], dtype: Any) -> tuple[np.ndarray, SlotRef]:
        """An uninitialised array in a free slot (a new one if none is free)."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        with self._lock:
            same_size = self._slots.setdefault(nbytes, [])
            slot = next((s for s in same_size if s.buf[0] == FREE), None)
            if slot is None:
                slot = _new_segment(HEADER + max(nbytes, 1))
                # Kept even after close: dropping it would unmap the array we return.
                same_size.append(slot)
                if self._closed:  # a read thread still running at exit: leave no name behind
                    slot.unlink()
            slot.buf[0] = IN_USE
        array = np.ndarray(shape, dtype, buffer=slot.buf, offset=HEADER)
        return array, SlotRef(slot.name, tuple(shape), dtype.str)

    def release(self, ref: SlotRef) -> None:
        """Gives back a slot whose array was not sent."""
        with self._lock:
            for slot in self._slots.get(math.prod(ref.shape) * np.dtype(ref.dtype).itemsize, []):
                if slot.name == ref.name:
                    slot.buf[0] = FREE

    def exit_process(self, status: int) -> None:
        """Unlinks every segment, then ends the process while holding the pool's lock: a read
        thread is then never halfway through making a segment (made, not yet unlinked),
        which would stay named in /dev/shm for good."""
        self.unlink_all()
        self._lock.acquire()
        os._exit(status)

    def unlink_all(self) -> int:
        """Removes every segment's name (the training process may hold some: their memory
        lives on until it drops them); returns how many.

        The segments stay mapped here: read threads may still be writing batches into them
        while the process exits (a `SharedMemory` object that is dropped unmaps its memory
        under any array over it, a segfault), and they may still reuse them."""
        with self._lock:
            slots = [] if self._closed else [s for same in self._slots.values() for s in same]
            self._closed = True
        for slot in slots:
            with contextlib.suppress(FileNotFoundError):  # the trainer unlinked it already
                slot.unlink()
        return len(slots)


_pool: SlotPool | None = None
_pool_lock = threading.Lock()


def worker_pool() -> SlotPool:
    """This process's pool; its segments are unlinked when the process exits."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = SlotPool()
            # multiprocessing runs this when a process exits, worker processes included.
            multiprocessing.util.Finalize(None, _pool.unlink_all, exitpriority=100)
        return _pool


class _Held(np.ndarray):
    """The training process's array over a slot: frees the slot when it is deallocated.

    Callers only ever see plain-ndarray views of it, which keep it alive."""

    def __del__(self) -> None:
        mapping = getattr(self, "_mapping", None)
        if mapping is not None and not mapping.closed:
            mapping[0] = 0  # FREE (a literal: module globals may be gone at interpreter exit)


class SlotOpener:
    """Opens slot references in the training process (one per pipeline).

    Segments are mapped with `mmap` over /dev/shm (Linux, as Grain's workers): an array
    over an mmap keeps the mapping alive, and it is unmapped when the last array goes.
    """

    def __init__(self) -> None:
        self._mapped: dict[str, mmap.mmap] = {}

    def open(self, ref: SlotRef) -> np.ndarray:
        """A view of the slot's array; the slot is freed when no view is left."""
        mapping = self._mapped.get(ref.name)
        if mapping is None:
            path = os.path.join(SHM_DIR, ref.name)
            fd = os.open(path, os.O_RDWR)
            try:
                mapping = mmap.mmap(fd, 0)
            finally:
                os.close(fd)
            os.unlink(path)  # both processes keep it mapped: the name is not needed
            # Workers share this process's resource tracker: it would unlink it again at exit.
            resource_tracker.unregister(f"/{ref.name}", "shared_memory")
            self._mapped[ref.name] = mapping
        held = _Held(ref.shape, np.dtype(ref.dtype), buffer=mapping, offset=HEADER)
        held._mapping = mapping
        return held.view(np.ndarray)

    def open_bytes(self, packed: PackedBytes) -> list[memoryview]:
        """The strings `pack_bytes` laid in a slot, as views (the slot is freed when none
        is left)."""
        data = memoryview(self.open(packed.ref))
        starts = (0, *packed.ends[:-1])
        return [data[a:b] for a, b in zip(starts, packed.ends, strict=True)]

    def __getstate__(self) -> dict[str, Any]:
        return {"_mapped": {}}  # mappings belong to this process
