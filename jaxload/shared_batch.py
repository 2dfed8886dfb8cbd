"""Batch arrays that a Grain worker builds in shared memory, and their cleanup.

Decoding straight into a `SharedMemoryArray` lets a camera array reach the training
process without the copy Grain otherwise makes when it moves a batch out of a worker:
Grain sends such an array by name (it reads the array's `metadata`), and the receiving
process unlinks the segment when done with it. Until then the worker owns the segment,
and segments of batches it built but never sent (its read-ahead buffer when the loader
closes, a batch that failed half-way) would stay in /dev/shm until the interpreter exits.
So an array made here counts as sent once Grain reads its `metadata`; an unsent one is
unlinked when it is garbage collected, and any left when the process exits are unlinked
then.
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing.util
import threading
from multiprocessing import shared_memory

import grain
import numpy as np

_lock = threading.Lock()
_unsent: dict[str, shared_memory.SharedMemory] = {}  # segment name -> segment
_exit_cleanup_registered = False


class WorkerArray(grain.multiprocessing.SharedMemoryArray):
    """A SharedMemoryArray that unlinks its segment unless it was handed to Grain."""

    @property
    def metadata(self) -> grain.multiprocessing.SharedMemoryArrayMetadata:
        with _lock:
            _unsent.pop(self.shm.name, None)  # Grain is sending it: the receiver unlinks
        return super().metadata

    def __del__(self) -> None:
        if isinstance(self.base, mmap.mmap):  # the array owning the mapping, not a view
            with _lock:
                unsent = _unsent.pop(self.shm.name, None)
            if unsent is not None:
                _unlink(unsent)
        super().__del__()


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised array in a new shared-memory segment (see the module docstring)."""
    global _exit_cleanup_registered
    array = WorkerArray(shape, dtype)
    with _lock:
        if not _exit_cleanup_registered:
            # multiprocessing runs these when a process exits, worker processes included.
            multiprocessing.util.Finalize(None, unlink_unsent, exitpriority=100)
            _exit_cleanup_registered = True
        _unsent[array.shm.name] = array.shm
    return array


def unlink_unsent() -> int:
    """Unlinks every segment from `empty` not handed to Grain; returns how many."""
    with _lock:
        segments = list(_unsent.values())
        _unsent.clear()
    for segment in segments:
        _unlink(segment)
    return len(segments)


def _unlink(segment: shared_memory.SharedMemory) -> None:
    with contextlib.suppress(FileNotFoundError):  # its receiver got there first
        segment.unlink()
