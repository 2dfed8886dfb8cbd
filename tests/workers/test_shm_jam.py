"""Nothing in /dev/shm can stop a loader from starting (issue #44).

A directory named `jaxload_<dead pid>_*` in /dev/shm (any process of the same user can make
one) made every loader start on the machine fail with a raw IsADirectoryError from the
start-up reclaim (jaxload.workers.processes.reclaim_shared_memory): a new user's test run
hit it 16 times. The reclaim now removes only regular files of this user that are named
like a dead loader's slot and mapped by nobody, and skips anything else.

/dev/shm is shared by every process on the machine: the names planted here are unique
(a uuid) and removed at the end, whatever happens.
"""

import os
import shutil
import uuid

import pytest

from jaxload import PipelineOptions, make_loader
from jaxload.workers import processes as workers
from jaxload.workers import shared_batch
from tests.support.fake_dataset import FakeDataset


def _dead_pid() -> int:
    """A pid no process has: above the kernel's pid_max (no process started for it)."""
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 12345


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """In the real /dev/shm, named like slots of a dead loader: a directory (with a file in
    it), a symlink to a file elsewhere, a fifo and (as root) a file of another user."""
    monkeypatch.setenv("JAXLOAD_RECLAIM_SHM", "1")  # wherever the tests run (containers)
    dead = _dead_pid()
    names = {kind: f"jaxload_{dead}_{uuid.uuid4().hex}" for kind in ("dir", "link", "fifo", "user")}
    names["x"] = f"jaxload_{dead}_x{uuid.uuid4().hex}"  # not a hex suffix: not even a slot name
    paths = {k: os.path.join(shared_batch.SHM_DIR, n) for k, n in names.items()}
    target = tmp_path / "not_shm_memory"
    target.write_bytes(b"keep me")
    try:
        os.mkdir(paths["dir"])
        with open(os.path.join(paths["dir"], "inside"), "wb") as f:
            f.write(b"keep me")
        os.mkdir(paths["x"])
        os.symlink(target, paths["link"])
        os.mkfifo(paths["fifo"])
        if os.geteuid() == 0:
            with open(paths["user"], "wb") as f:
                f.write(b"\0" * 4096)
            os.chown(paths["user"], 12345, 12345)
        else:
            del paths["user"]
        yield paths, target
    finally:
        for path in paths.values():
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)


def test_the_reclaim_skips_what_it_cannot_prove_is_a_dead_loaders_slot(planted):
    paths, target = planted
    removed = workers.reclaim_shared_memory()
    assert not {os.path.basename(p) for p in paths.values()} & set(removed)
    assert all(os.path.lexists(p) for p in paths.values())
    assert target.read_bytes() == b"keep me"


def test_loaders_start_and_run_with_them_there(planted):
    paths, _ = planted
    loader = make_loader(
        FakeDataset([5, 7, 9]),
        global_batch_size=4,
        host_index=0,
        host_count=1,
        options=PipelineOptions(num_workers=0),
    )
    try:
        batches = [next(loader) for _ in range(3)]
    finally:
        loader.close()
    assert [b["index"].shape for b in batches] == [(4,)] * 3
    assert all(os.path.lexists(p) for p in paths.values())


def test_a_dead_loaders_regular_file_is_still_reclaimed(monkeypatch):
    monkeypatch.setenv("JAXLOAD_RECLAIM_SHM", "1")
    name = f"jaxload_{_dead_pid()}_{uuid.uuid4().hex}"
    path = os.path.join(shared_batch.SHM_DIR, name)
    with open(path, "wb") as f:
        f.write(b"\0" * 4096)
    try:
        assert name in workers.reclaim_shared_memory()
        assert not os.path.exists(path)
    finally:
        if os.path.lexists(path):
            os.unlink(path)
