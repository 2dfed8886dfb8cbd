"""The Grain stages around the read, each built from a spec (tests/support/specs.py)
without make_loader: `ToGlobalArrays` (numpy rows -> global jax.Arrays) and the reader
watchdog (`WatchReaders`)."""

from __future__ import annotations

import threading
import time

import grain
import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxload.errors import WorkerTimeoutError
from jaxload.stages.pipeline import ToGlobalArrays, WatchReaders
from jaxload.stages.read_batch import ReadBatch
from tests.support.fake_dataset import FakeDataset
from tests.support.specs import loader_spec


def test_to_global_arrays_makes_the_rows_global_arrays_over_the_sharding():
    devices = jax.devices()
    sharding = NamedSharding(jax.make_mesh((len(devices),), ("data",)), P("data"))
    g = 2 * len(devices)
    keys = ["observation.state", "observation.images.top", "index", "task"]
    spec, datasets = loader_spec(
        FakeDataset([9, 4]), global_batch_size=g, sharding=sharding, keys=keys
    )
    rows = ReadBatch(spec.for_readers(), datasets, 0).map(1)
    out = ToGlobalArrays(spec).map(dict(rows))
    try:
        for key in keys[:-1]:
            assert isinstance(out[key], jax.Array) and out[key].shape[0] == g
            assert out[key].sharding.is_equivalent_to(
                NamedSharding(sharding.mesh, P("data")), out[key].ndim
            )
            np.testing.assert_array_equal(np.asarray(out[key]), rows[key].astype(out[key].dtype))
        assert isinstance(out["task"], np.ndarray)  # strings stay host-local numpy
    finally:
        datasets.close()


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
