"""Shared-memory batch arrays built by workers: a segment is unlinked unless Grain sent it."""

import os
import time

import numpy as np
from grain._src.python.ipc import shared_memory_array as grain_shm

from jaxload import shared_batch


def _exists(name: str) -> bool:
    return os.path.exists(f"/dev/shm/{name}")


def _gone_soon(name: str, timeout_s: float = 10.0) -> bool:
    """Grain may unlink on a background thread (once a loader has enabled it)."""
    deadline = time.monotonic() + timeout_s
    while _exists(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _exists(name)


def test_an_array_grain_never_sent_is_unlinked_when_dropped():
    array = shared_batch.empty((4, 8, 3), np.uint8)
    name = array.shm.name
    view = array.reshape(-1)  # a view does not release the segment
    del array
    assert _exists(name)
    del view
    assert not _exists(name)


def test_an_array_grain_sent_is_left_to_its_receiver():
    array = shared_batch.empty((16,), np.float32)
    array[:] = np.arange(16)
    # What a Grain worker does with an element: send the metadata, drop the array.
    sent = grain_shm.copy_to_shm({"x": array})["x"]
    del array
    assert _exists(sent.name)
    received = grain_shm.open_from_shm({"x": sent})["x"]  # the training process
    assert np.array_equal(received, np.arange(16))
    del received  # the receiver unlinks
    assert _gone_soon(sent.name)


def test_segments_left_at_exit_are_unlinked():
    kept = [shared_batch.empty((10,), np.uint8) for _ in range(3)]
    names = [a.shm.name for a in kept]
    assert shared_batch.unlink_unsent() >= 3  # what the exit handler runs
    assert not any(_exists(n) for n in names)
    del kept  # dropping them afterwards is harmless
