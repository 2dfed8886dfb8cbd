"""The read stage's `Lookahead` (jaxload.storage.prefetch) built from a spec
(tests/support/specs.py), without make_loader, over a remote dataset.

Faked: the network only. `serve_locally` (tests/support/remote_fakes.py) makes the
dataset's s3:// URL read a converted directory through fsspec's local filesystem, in this
process; the ObjectStore, RemoteStore, offset index, record checks, cache and the
lookahead are the real ones (tests/storage/test_remote.py runs them against an S3 server).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from jaxload.errors import DatasetError
from jaxload.stages.read_batch import ReadBatch
from jaxload.storage.prefetch import Lookahead, _fetch_time
from tests.support.specs import loader_spec, remote_loader_spec

WINDOWS = {"action": [0.0, 0.1, 0.2]}


KWARGS = dict(global_batch_size=4, seed=3, delta_timestamps=WINDOWS)


def remote_spec(monkeypatch, root, **remote):
    return remote_loader_spec(monkeypatch, root, remote=remote, **KWARGS)


def _settle(store, seconds=10.0):
    """Waits until no fetch is in flight (the store's pool lands them)."""
    deadline = time.monotonic() + seconds
    while store._inflight and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not store._inflight


def _records(spec, datasets, d, k):
    """The (shard, record) keys batch k reads of dataset d."""
    ids, located = spec.stream.locate(spec.positions(0, k))
    return {tuple(key) for key in datasets[d].plan_read(located[ids == d]).record_keys().tolist()}


def test_records_of_the_next_batches_are_fetched_before_those_batches_are_read(
    monkeypatch, small_converted
):
    spec, datasets = remote_spec(monkeypatch, small_converted)
    try:
        ((d, store),) = datasets.stores.items()
        lookahead = Lookahead(spec, datasets, step=1)
        positions = lambda k: spec.positions(0, k)  # noqa: E731
        lookahead.before(0, positions)  # the first batch: measures what a batch reads
        lookahead.before(1, positions)  # then plans a window ahead and fetches what is due
        _settle(store)
        ahead = range(2, lookahead._planned_to + 1)
        assert len(ahead) >= 3
        # records not due yet (their fetch time lies ahead) aside, all are cached already
        pending = {key for _, _, _, keys in lookahead._due for key in keys}
        fetched = [
            key for k in ahead for key in _records(spec, datasets, d, k) if key not in pending
        ]
        assert fetched  # due by now (how many depends on the measured latency)
        assert all(store.cache.peek(key) is not None for key in fetched)
        assert store.cache.hits == 0
    finally:
        datasets.close()


def test_each_planned_record_is_booked_for_the_first_batch_that_reads_it(
    monkeypatch, small_converted
):
    spec, datasets = remote_spec(monkeypatch, small_converted)
    try:
        ((d, store),) = datasets.stores.items()
        lookahead = Lookahead(spec, datasets, step=2)  # two worker processes: every other batch
        positions = lambda k: spec.positions(0, k)  # noqa: E731
        lookahead.before(1, positions)
        lookahead.before(3, positions)
        planned = sorted(lookahead.located)
        assert planned and all(k % 2 == 1 and k > 3 for k in planned)  # this reader's only
        for k in planned:
            for key in _records(spec, datasets, d, k):
                assert store.cache.next_use(key) <= k
        first = {}  # batches 1 and 3 were planned too (located taken by before(1), before(3))
        for k in [1, 3, *planned]:
            for key in _records(spec, datasets, d, k):
                first.setdefault(key, k)
        assert all(store.cache.next_use(key) == k for key, k in first.items())
    finally:
        datasets.close()


def test_what_a_batch_reads_is_what_was_planned_for_it_and_the_batches_are_unchanged(
    monkeypatch, small_converted
):
    spec, datasets = remote_spec(monkeypatch, small_converted)
    local_spec, local = loader_spec(small_converted, **KWARGS)
    try:
        (d,) = datasets.stores
        read, want = ReadBatch(spec, datasets, 0), ReadBatch(local_spec, local, 0)
        assert read.lookahead is not None
        for k in range(8):
            reads = read.lookahead.before(k, read.positions)
            ids, located = spec.stream.locate(read.positions(k))
            if k:  # planned ahead of it
                np.testing.assert_array_equal(reads.located[1], located)
                keys = datasets[d].plan_read(located[ids == d]).record_keys()
                np.testing.assert_array_equal(reads.plans[d].record_keys(), keys)
            assert reads.contexts[d].batch == k
        for k in range(8):  # a ReadBatch of its own: the lookahead as the pipeline runs it
            got, expected = ReadBatch(spec, datasets, 0).map(k), want.map(k)
            assert got.keys() == expected.keys()
            for key in expected:
                np.testing.assert_array_equal(got[key], expected[key])
    finally:
        datasets.close()
        local.close()


def test_a_whole_epoch_read_ahead_is_served_from_the_cache(monkeypatch, small_converted):
    spec, datasets = remote_spec(monkeypatch, small_converted)
    try:
        ((_, store),) = datasets.stores.items()
        read = ReadBatch(spec, datasets, 0)
        for k in range(12):
            read.map(k)
            _settle(store)  # the fetches due land before the next batch is read
        stats = store.stats()
        assert stats["cache_hits"] > 0.8 * (stats["cache_hits"] + stats["cache_misses"]), stats
    finally:
        datasets.close()


def test_a_lookahead_whose_store_was_closed_fetches_nothing(monkeypatch, small_converted):
    spec, datasets = remote_spec(monkeypatch, small_converted)
    try:
        ((_, store),) = datasets.stores.items()
        lookahead = Lookahead(spec, datasets, step=1)
        positions = lambda k: spec.positions(0, k)  # noqa: E731
        lookahead.before(0, positions)
        _settle(store)
        requests = store.transport.counts()
        store.close()  # loader.close() while a read thread is still in its batch
        with pytest.raises(DatasetError, match="loader reading this was closed"):
            lookahead.before(1, positions)
        assert store.transport.counts() == requests
    finally:
        datasets.close()


def test_sweep_fetches_every_record_within_its_window_at_its_phase():

    rng = np.random.default_rng(1)
    for lead, period in ((1, 1), (3, 6), (5, 17)):
        for use, phase in zip(rng.integers(0, 500, 200), rng.random(200), strict=True):
            at = _fetch_time(int(use), lead, period, float(phase))
            assert use - lead - period < at <= use - lead  # in the window, before the lead
            assert (at - int(phase * period)) % period == 0  # when the cursor passes it
