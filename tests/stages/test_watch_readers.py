"""The reader watchdog (`WatchReaders`) over a reader that stops delivering, with a spec
from tests/support/specs.py naming the stuck batch."""

from __future__ import annotations

import threading
import time

import grain
import numpy as np
import pytest

from jaxload.errors import WorkerTimeoutError
from jaxload.stages.watch_readers import WatchReaders
from tests.support.fake_dataset import FakeDataset
from tests.support.specs import loader_spec


class _Blocking(grain.IterDataset):
    """Batch 0 at once, then nothing until `release` is set (a reader stuck on storage)."""

    def __init__(self, release: threading.Event):
        super().__init__()
        self.release = release

    def __iter__(self):
        return _BlockingIterator(self.release)


class _BlockingIterator(grain.DatasetIterator):
    def __init__(self, release: threading.Event):
        super().__init__()
        self.release, self.n = release, 0

    def __next__(self):
        if self.n:
            self.release.wait()
        self.n += 1
        return {"n": np.array([self.n])}

    def get_state(self):
        return {"n": self.n}

    def set_state(self, state):
        self.n = state["n"]


def test_the_reader_watchdog_names_the_stuck_batch_after_the_timeout():
    spec, _ = loader_spec(FakeDataset([6, 6]), global_batch_size=2)
    release = threading.Event()
    watched = WatchReaders(_Blocking(release), 0.3, lambda n: spec.describe(0, n), None, 0)
    it = iter(watched)
    try:
        assert next(it)["n"].tolist() == [1]  # a reader's first batch: delivered
        began = time.monotonic()
        with pytest.raises(WorkerTimeoutError, match=r"batch 1 \(global positions 2\.\.3: ") as e:
            next(it)
        assert 0.25 < time.monotonic() - began < 5
        assert "worker_timeout_s=0.3" in str(e.value)
        with pytest.raises(WorkerTimeoutError):  # the pipeline stays failed: no batch skipped
            next(it)
    finally:
        release.set()
        it.close()


def test_the_reader_watchdog_passes_batches_that_come_in_time():
    release = threading.Event()
    release.set()
    it = iter(WatchReaders(_Blocking(release), 5.0, str, None, 0))
    try:
        assert [next(it)["n"].item() for _ in range(3)] == [1, 2, 3]
    finally:
        it.close()
