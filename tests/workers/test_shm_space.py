"""/dev/shm full or read-only is a jaxload error before the first batch, never SIGBUS
(issue #44). Before: a raw OSError (ENOSPC, EROFS) naming no path, with a Grain
AttributeError traceback, or workers killed by SIGBUS after 26-57 s with a WorkerDiedError
suggesting a retry.

What is simulated, and why: /dev/shm is shared by every process on this machine, so it is
neither filled nor remounted here. The file system's numbers come from `os.statvfs`, read
through `shm_space._statvfs`: the tests give it those of a 64 MiB tmpfs nearly full, or
flagged read-only (ST_RDONLY), as a container's /dev/shm would report. A full tmpfs's
allocation failure is `posix_fallocate` raising ENOSPC, as the kernel does; the segment is a
real one in /dev/shm, removed again.
"""

import errno
import os
import types

import pytest

from jaxload import PipelineOptions, make_loader
from jaxload.errors import SharedMemoryError
from jaxload.workers import shared_batch, shm_space
from tests.support.fake_dataset import FakeDataset

MIB = 2**20


def _tmpfs(free_mib: int, size_mib: int = 64, read_only: bool = False):
    """statvfs of a `size_mib` tmpfs with `free_mib` free (4 KiB blocks)."""
    blocks = lambda mib: mib * MIB // 4096  # noqa: E731
    return lambda path: types.SimpleNamespace(
        f_bavail=blocks(free_mib), f_blocks=blocks(size_mib), f_frsize=4096,
        f_flag=os.ST_RDONLY if read_only else 0,
    )  # fmt: skip


def _loader(num_workers=2, **options):
    return make_loader(
        FakeDataset([50, 70], cameras={"observation.images.top": (480, 640, 3)}),
        global_batch_size=32,
        host_index=0,
        host_count=1,
        options=PipelineOptions(num_workers=num_workers, **options),
    )


def test_a_full_shm_is_refused_before_any_worker_starts(monkeypatch):
    monkeypatch.setattr(shm_space, "_statvfs", _tmpfs(free_mib=60))
    loader = _loader(num_workers=2, prefetch=2, worker_buffer_size=1)
    # a fast-tier test: a worker process started here would fail it (tests/conftest.py)
    with pytest.raises(SharedMemoryError) as raised:
        next(loader)
    said = str(raised.value)
    assert said.startswith("/dev/shm (") and "60.0 MiB free of 64.0 MiB" in said
    assert "a batch takes 28.1 MiB x 7 in flight (2 workers" in said  # 32 x 480x640x3
    assert "--shm-size" in said and "fewer workers" in said and "smaller prefetch" in said
    loader.close()


def test_a_read_only_shm_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr(shm_space, "_statvfs", _tmpfs(free_mib=60_000, read_only=True))
    loader = _loader()
    with pytest.raises(SharedMemoryError, match=r"^/dev/shm \(.*\) is read-only.*num_workers=0"):
        next(loader)
    loader.close()


def test_enough_room_or_no_workers_passes(monkeypatch):
    monkeypatch.setattr(shm_space, "_statvfs", _tmpfs(free_mib=60))
    options = PipelineOptions(num_workers=0)
    shm_space.check_shared_memory(
        10**12, options, "/dev/shm"
    )  # no workers: nothing goes to /dev/shm
    monkeypatch.setattr(shm_space, "_statvfs", _tmpfs(free_mib=4096, size_mib=8192))
    shm_space.check_shared_memory(28 * MIB, PipelineOptions(num_workers=2).resolve(), "/dev/shm")


def test_a_segment_shm_cannot_hold_is_an_error_not_sigbus_later(monkeypatch):
    before = set(os.listdir(shared_batch.SHM_DIR))

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shared_batch.os, "posix_fallocate", full)
    with pytest.raises(SharedMemoryError, match=r"^/dev/shm \(.*\) has .* free of .*No space"):
        shared_batch.SlotPool().array((1000,), "uint8")
    mine = shared_batch.segment_prefix()
    assert not [n for n in set(os.listdir(shared_batch.SHM_DIR)) - before if n.startswith(mine)]
