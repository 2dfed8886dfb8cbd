"""A bounded number of open shard files per process (jaxload/format/open_shards.py).

The pool on its own, with threads racing over fake readers that record misuse; then a
real dataset of 2,000 shards read shuffled by 2 worker processes under `ulimit -n 256`
(a subprocess that lowers its own limit), and a process that runs out of descriptors.
"""

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jaxload.converters.convert import convert
from jaxload.errors import OpenFilesLimitError
from jaxload.format import open_shards
from jaxload.format.open_shards import ReaderPool, shard_capacity
from tests.conftest import REPO_ROOT
from tests.support.lerobot_factory import write_lerobot_v3


class FakeReader:
    """Counts the readers open at once and fails on a read of a closed reader or two
    reads of one reader at once."""

    open_now = 0
    most_open = 0
    lock = threading.Lock()

    def __init__(self):
        with FakeReader.lock:
            FakeReader.open_now += 1
            FakeReader.most_open = max(FakeReader.most_open, FakeReader.open_now)
        self.closed = False
        self.in_use = threading.Lock()

    def read(self):
        assert not self.closed, "a closed reader was read"
        assert self.in_use.acquire(blocking=False), "two threads read one reader at once"
        time.sleep(random.random() * 1e-4)
        assert not self.closed, "a reader was closed while it was read"
        self.in_use.release()

    def close(self):
        assert not self.in_use.locked(), "a reader was closed while it was read"
        self.closed = True
        with FakeReader.lock:
            FakeReader.open_now -= 1


def test_pool_bounds_open_readers_and_never_closes_one_in_use():
    pool, errors = ReaderPool(capacity=5), []

    def reads(seed):
        rng = random.Random(seed)
        try:
            for _ in range(2000):
                key = ("dataset", rng.randrange(40))
                reader = pool.checkout(key, FakeReader)
                try:
                    reader.read()
                finally:
                    pool.checkin(key, reader)
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=reads, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert FakeReader.most_open == 5 and pool.open == FakeReader.open_now <= 5
    pool.drop(lambda key: True)
    assert pool.open == FakeReader.open_now == 0


def test_pool_recovers_from_emfile_by_closing_idle_readers():
    pool, opened = ReaderPool(capacity=10), []

    def open_unless_full():
        if len([r for r in opened if not r.closed]) >= 2:  # the process's last descriptor
            raise OpenFilesLimitError("out of descriptors")
        opened.append(FakeReader())
        return opened[-1]

    for shard in range(2):
        pool.checkin(shard, pool.checkout(shard, open_unless_full))
    pool.checkin(2, pool.checkout(2, open_unless_full))  # closed shards 0 and 1, then opened
    assert [r.closed for r in opened] == [True, True, False] and pool.open == 1
    held = pool.checkout(2, open_unless_full)
    opened.append(FakeReader())  # something else takes the freed descriptor
    with pytest.raises(OpenFilesLimitError):
        pool.checkout(3, open_unless_full)
    assert pool.open == 1  # the failed open gave its slot back
    pool.checkin(2, held)


def test_capacity_follows_the_open_files_limit(monkeypatch):
    monkeypatch.delenv(open_shards.ENV_MAX_OPEN_SHARDS, raising=False)
    assert shard_capacity(256) == (256 - open_shards.RESERVED_DESCRIPTORS) // 2
    assert shard_capacity(1 << 20) == open_shards.MAX_OPEN_SHARDS
    assert shard_capacity(40) == 0
    monkeypatch.setenv(open_shards.ENV_MAX_OPEN_SHARDS, "1000")
    assert shard_capacity(1 << 20) == 1000 and shard_capacity(256) == 96


def test_max_open_shards_is_checked_and_named(monkeypatch):
    for bad in ("abc", "0", "-3"):
        monkeypatch.setenv(open_shards.ENV_MAX_OPEN_SHARDS, bad)
        with pytest.raises(ValueError, match=f"JAXLOAD_MAX_OPEN_SHARDS='{bad}': give the number"):
            shard_capacity(1 << 20)
    monkeypatch.setenv(open_shards.ENV_MAX_OPEN_SHARDS, "1")
    too_few = "JAXLOAD_MAX_OPEN_SHARDS=1 lets a process keep 1 shard file open: too few for 2"
    with pytest.raises(OpenFilesLimitError, match=too_few):
        open_shards.check_open_files_limit(threads=2)
    open_shards.check_open_files_limit(threads=1)


SHARDS = 2000


@pytest.fixture(scope="module")
def two_thousand_shards(tmp_path_factory) -> Path:
    """2,000 episodes of 2 frames, one shard each (shard_bytes=1)."""
    root = tmp_path_factory.mktemp("open_shards")
    source = write_lerobot_v3(root / "src", episode_lengths=[2] * SHARDS, cameras={})
    out = convert(source, root / "out", workers=1, progress=False, shard_bytes=1).out
    assert len(list((out / "data").glob("*.array_record"))) == SHARDS
    return out


def _child(*args) -> dict:
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.open_files_child", *map(str, args)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.processes
def test_two_thousand_shards_shuffled_by_two_workers_under_ulimit_256(two_thousand_shards):
    result = _child("read", two_thousand_shards, 256)
    # Every frame once: 80 batches of 50, shuffled over every shard.
    assert sorted(map(tuple, result["frames"])) == [(e, f) for e in range(SHARDS) for f in (0, 1)]
    assert result["frames"][:4] != [[0, 0], [0, 1], [1, 0], [1, 1]]
    peaks, bound = result["peak"].values(), shard_capacity(256)
    assert all(total <= 256 for total, _ in peaks)
    # The two workers read far more shards than they kept open; the trainer only shard 0
    # (jaxload.open checks it), the resource tracker and the fork server none.
    assert sorted(shards for _, shards in peaks)[-3:] == [1, bound, bound], result["peak"]
    assert len(peaks) == 5, result["peak"]  # trainer, tracker, server, 2 workers


@pytest.mark.processes
def test_running_out_of_descriptors_says_so(two_thousand_shards):
    result = _child("exhaust", two_thousand_shards, 256)
    assert result["recovered"]
    name, message = result["error"]
    assert name == "OpenFilesLimitError", message
    assert "too many open files" in message and "ulimit -n) of 256" in message
    assert "changed" not in message
    name, message = result["too_low"]
    assert name == "OpenFilesLimitError"
    assert "the open-files limit (ulimit -n) is 70: too low for 4 read threads" in message
    name, message = result["too_low_for_workers"]
    assert name == "OpenFilesLimitError", message
    assert "the open-files limit (ulimit -n) is 70: too low for 8 worker processes" in message


@pytest.mark.processes
def test_a_descriptor_freed_after_a_failed_open_is_not_a_corrupt_shard(two_thousand_shards):
    """ArrayRecord's open fails for want of a descriptor, and another thread frees one
    before jaxload asks the OS why: the shard opens on a second try (it was called
    corrupt)."""
    result = _child("freed", two_thousand_shards, 256)
    assert result == {"read": 1}, result
