"""Shared-memory slots (jaxload.workers.shared_batch): a worker's pool and the training process's
views, both in this process here (the loader tests run them across real workers)."""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

from jaxload.workers import shared_batch


def _exists(name: str) -> bool:
    return os.path.exists(os.path.join(shared_batch.SHM_DIR, name))


def test_a_slot_is_reused_only_after_the_trainer_drops_every_view():
    pool, opener = shared_batch.SlotPool(), shared_batch.SlotOpener()
    try:
        array, ref = pool.array((4, 8, 3), np.uint8)
        array[:] = 7
        view = opener.open(ref)
        assert not _exists(ref.name)  # unlinked once mapped on both sides
        row = view[1]  # views of the view keep the slot too
        del view
        gc.collect()
        _, busy = pool.array((4, 8, 3), np.uint8)
        assert busy.name != ref.name and (row == 7).all()
        del row
        gc.collect()
        again, reused = pool.array((4, 8, 3), np.uint8)
        assert reused.name == ref.name and again[0, 0, 0] == 7  # same memory, not zeroed
    finally:
        pool.unlink_all()


def test_a_slot_is_never_handed_out_twice_while_the_worker_holds_it():
    pool = shared_batch.SlotPool()
    try:
        refs = [pool.array((16,), np.float32)[1] for _ in range(3)]
        assert len({r.name for r in refs}) == 3
        pool.release(refs[1])  # the worker did not send it
        _, again = pool.array((16,), np.float32)
        assert again.name == refs[1].name
    finally:
        pool.unlink_all()


def test_the_trainer_reads_what_the_worker_wrote_in_a_reused_slot():
    pool, opener = shared_batch.SlotPool(), shared_batch.SlotOpener()
    try:
        for value in range(3):
            array, ref = pool.array((2, 5), np.int64)
            array[:] = value
            received = opener.open(ref)
            assert received.dtype == np.int64 and (received == value).all()
            assert type(received) is np.ndarray
            del received, array
            gc.collect()
    finally:
        pool.unlink_all()


def test_segments_never_opened_are_unlinked_at_exit():
    pool = shared_batch.SlotPool()
    names = [pool.array((10,), np.uint8)[1].name for _ in range(3)]
    assert all(_exists(n) and n.startswith(f"jaxload_{os.getpid()}_") for n in names)
    assert pool.unlink_all() == 3  # what the exit handler runs
    assert not any(_exists(n) for n in names)


@pytest.mark.processes
def test_arrays_stay_writable_after_the_exit_handler_ran():
    # A worker's read threads may still be writing a batch while its exit handler runs
    # (unlink_all), or make a new slot after it. The arrays must stay mapped: dropping the
    # SharedMemory objects unmapped them and the next write segfaulted the worker (found by
    # test_loader_lerobot's close test). A subprocess, so a regression fails rather than
    # killing pytest.
    script = """
import gc, os, numpy as np
from jaxload.workers import shared_batch
pool = shared_batch.SlotPool()
before, _ = pool.array((1 << 20,), np.uint8)
pool.unlink_all()
after, ref = pool.array((1 << 20,), np.uint8)
gc.collect()
before[:] = 1
after[:] = 2
assert not os.path.exists(os.path.join(shared_batch.SHM_DIR, ref.name))
print(int(before.sum()) + int(after.sum()))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(3 << 20)]


def test_compressed_gops_cross_in_one_slot_freed_when_the_batch_is_dropped():
    """A batch's GOPs (decoded on the devices) travel packed in a slot, not pickled through
    Grain's pipe; the views the trainer gets keep the slot until the last one goes."""
    pool, opener = shared_batch.SlotPool(), shared_batch.SlotOpener()
    try:
        gops = [b"first gop", b"", bytes(range(256)) * 3, b"last"]
        packed = shared_batch.pack_bytes(gops, pool)
        views = opener.open_bytes(packed)
        assert [bytes(v) for v in views] == gops
        _, busy = pool.array((len(b"".join(gops)),), np.uint8)
        assert busy.name != packed.ref.name  # in use while the views live
        del views
        gc.collect()
        _, again = pool.array((len(b"".join(gops)),), np.uint8)
        assert again.name == packed.ref.name  # free once the batch is dropped
    finally:
        pool.unlink_all()
