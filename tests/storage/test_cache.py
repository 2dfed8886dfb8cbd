"""The record cache (jaxload.storage.cache): furthest-next-use eviction, its counters, the
disk cache's checks; first as a store built from a spec (tests/support/specs.py) uses it,
then alone against a plain model.

Faked in the spec-built tests: the network only (`serve_locally`, tests/support/
remote_fakes.py: the s3:// URL reads a converted directory through fsspec's local
filesystem, in this process); the store, its record checks and the cache are the real ones.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from jaxload.stages.read_batch import ReadBatch
from jaxload.storage.cache import NEVER, RecordCache, simulate
from tests.support.specs import loader_spec, remote_loader_spec

WINDOWS = {"action": [0.0, 0.1, 0.2]}
KWARGS = dict(global_batch_size=4, seed=3, delta_timestamps=WINDOWS)


def remote_spec(monkeypatch, root, **remote):
    return remote_loader_spec(monkeypatch, root, remote=remote, **KWARGS)


def _same_batches(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])


def test_reading_a_batch_uses_up_its_planned_reads_of_each_record(monkeypatch, small_converted):
    spec, datasets = remote_spec(monkeypatch, small_converted)
    try:
        ((d, store),) = datasets.stores.items()
        read = ReadBatch(spec, datasets, 0)
        read.map(0)
        read.map(1)  # plans a window ahead
        k = 2
        ids, located = spec.stream.locate(read.positions(k))
        keys = [tuple(x) for x in datasets[d].plan_read(located[ids == d]).record_keys().tolist()]
        assert all(store.cache.next_use(key) <= k for key in keys)
        read.map(k)
        later = {}  # the next planned batch reading each, if any
        for j in sorted(read.lookahead.located):
            jids, jlocated = read.lookahead.located[j]
            for key in datasets[d].plan_read(jlocated[jids == d]).record_keys().tolist():
                later.setdefault(tuple(key), j)
        for key in keys:  # batch k's use is gone: next is a later batch's, or none
            assert store.cache.next_use(key) == later.get(key, NEVER) and later.get(key, k + 1) > k
    finally:
        datasets.close()


def test_a_cache_of_two_batches_stays_within_its_budget_and_reads_stay_exact(
    monkeypatch, small_converted
):
    spec, datasets = remote_spec(monkeypatch, small_converted)
    local_spec, local = loader_spec(small_converted, **KWARGS)
    try:
        ((_, store),) = datasets.stores.items()
        read = ReadBatch(spec, datasets, 0)
        read.map(0)
        per_batch = store.cache.bytes  # a batch's records, fetched for it
        assert per_batch > 0
        store.cache.budget_bytes = 2 * per_batch
        want = ReadBatch(local_spec, local, 0)
        for k in range(1, 24):  # two epochs
            _same_batches(read.map(k), want.map(k))
            assert store.cache.bytes <= store.cache.budget_bytes
        assert store.cache.evictions > 0
    finally:
        datasets.close()
        local.close()


def test_a_damaged_disk_cache_file_is_fetched_again_never_returned(
    monkeypatch, small_converted, tmp_path
):
    spec, datasets = remote_spec(monkeypatch, small_converted, cache_dir=str(tmp_path / "cache"))
    local_spec, local = loader_spec(small_converted, **KWARGS)
    try:
        ((_, store),) = datasets.stores.items()
        read, want = ReadBatch(spec, datasets, 0), ReadBatch(local_spec, local, 0)
        _same_batches(read.map(0), want.map(0))
        (directory,) = (tmp_path / "cache").iterdir()
        files = [f for f in directory.iterdir() if f.name != ".owner"]
        assert files
        for f in files:  # every cached record damaged on disk
            data = bytearray(f.read_bytes())
            data[len(data) // 2] ^= 0xFF
            f.write_bytes(bytes(data))
        for k in range(1, 6):
            _same_batches(read.map(k), want.map(k))
        assert store.stats()["cache_damaged"] >= 1
    finally:
        datasets.close()
        local.close()


def test_cache_evicts_the_record_used_furthest_ahead():
    cache = RecordCache(budget_bytes=30)
    for key, batch in (("a", 1), ("b", 5), ("c", 2)):
        cache.plan(key, batch)
    cache.put("a", b"x" * 10)
    cache.put("b", b"x" * 10)
    cache.put("c", b"x" * 10)
    cache.put("d", b"x" * 10)  # never planned: goes first (itself)
    assert "d" not in cache and len(cache) == 3
    cache.plan("e", 3)
    cache.put("e", b"x" * 10)  # b (batch 5) is furthest ahead
    assert "b" not in cache and {"a", "c", "e"} <= {k for k in "ace" if k in cache}


def test_cache_counts_the_bytes_still_to_be_read_and_records_evicted_before_their_use():
    cache = RecordCache(budget_bytes=30)
    cache.plan("a", 1)
    cache.plan("b", 2)
    for key in "abn":  # n: never planned
        cache.put(key, b"x" * 10)
    assert cache.planned_bytes == 20 and cache.take_peak_planned() == 20
    cache.get("a", batch=1)  # its last planned use
    assert cache.planned_bytes == 10
    cache.plan("c", 3)
    cache.plan("d", 4)
    cache.put("c", b"x" * 10)  # evicts n (never planned), then a (read): neither early
    cache.put("d", b"x" * 10)
    assert cache.early_evictions == 0 and cache.planned_bytes == 30
    cache.plan("e", 5)
    cache.put("e", b"x" * 10)  # the furthest use (e itself) goes, before batch 5 read it
    assert cache.early_evictions == 1 and cache.planned_bytes == 30
    assert cache.stats()["cache_early_evictions"] == 1
    assert cache.take_peak_planned() == 30
    cache.close()
    assert cache.planned_bytes == 0


def test_optimal_policy_beats_lru_on_a_loader_order():
    rng = np.random.default_rng(0)
    accesses = [int(k) for k in rng.permutation(np.tile(np.arange(200), 5))]
    sizes = dict.fromkeys(range(200), 100)
    optimal = simulate(accesses, sizes, 2000, "optimal")
    lru = simulate(accesses, sizes, 2000, "lru")
    assert optimal["hit_rate"] > lru["hit_rate"]
    assert simulate(accesses, sizes, 10**9, "lru")["hit_rate"] == pytest.approx(0.8)


@pytest.mark.processes  # a subprocess: a process that has ended
def test_disk_cache_removes_only_directories_of_dead_processes(tmp_path):
    import subprocess
    import sys

    from jaxload.storage.cache import RecordCache

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    orphan = tmp_path / f"jaxload-cache-{int(dead.stdout)}-abcd1234"  # as before 2026-11-27
    orphan.mkdir()
    (orphan / "0").write_bytes(b"x")
    mine = tmp_path / "notes.txt"
    mine.write_text("the user's")
    cache = RecordCache(100, tmp_path)
    cache.plan("a", 1)
    cache.put("a", b"y" * 10)
    assert not orphan.exists() and mine.read_text() == "the user's"
    assert cache.get("a", 1) == b"y" * 10
    directory = cache._data.directory
    assert os.path.basename(directory).startswith(f"jaxload-cache-{os.getpid()}@")
    cache.close()
    assert not (tmp_path / directory).exists() and mine.exists()


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "disk"])
def test_cache_matches_a_plain_model_of_furthest_next_use_through_random_operations(
    on_disk, tmp_path, monkeypatch
):
    # The cache keeps its order in a heap and a queue of lazily invalidated entries, dropped
    # now and then (here often: a small slack); a model that searches every record at each
    # eviction must agree with it on what is kept, counted and returned, whichever way
    # records are read and stored.
    monkeypatch.setattr(RecordCache, "COMPACT_SLACK", 8)
    rng = np.random.default_rng(7)

    class Model:
        def __init__(self, budget):
            self.budget, self.data, self.uses, self.touched, self.clock = budget, {}, {}, {}, 0
            self.early = self.hits = self.misses = self.evictions = 0

        def touch(self, key):
            self.clock += 1
            self.touched[key] = self.clock

        def next_use(self, key):
            return self.uses[key][0] if self.uses.get(key) else 1 << 62

        def plan(self, key, batch):
            uses = self.uses.setdefault(key, [])
            if not uses and key in self.data:
                self.touch(key)
            if not uses or uses[-1] != batch:
                uses.append(batch)

        def get(self, key, batch):
            uses = self.uses.get(key, [])
            while uses and uses[0] <= batch:
                uses.pop(0)
            if key in self.data:
                self.touch(key)
                self.hits += 1
                return self.data[key]
            self.misses += 1
            return None

        def put(self, key, payload):
            if key in self.data:
                return
            self.data[key] = payload
            self.touch(key)
            while sum(map(len, self.data.values())) > self.budget:
                victim = max(self.data, key=lambda k: (self.next_use(k), -self.touched[k]))
                del self.data[victim]
                self.evictions += 1
                self.early += bool(self.uses.get(victim))

    cache = RecordCache(budget_bytes=60, directory=tmp_path / "cache" if on_disk else None)
    model, batch, compactions = Model(60), 0, 0
    compact = RecordCache._compact

    def counted(self):
        nonlocal compactions
        compactions += 1
        compact(self)

    monkeypatch.setattr(RecordCache, "_compact", counted)
    for _ in range(4000):
        op = rng.integers(5)
        keys = [(int(rng.integers(2)), int(r)) for r in rng.integers(0, 30, rng.integers(1, 6))]
        if op == 0:
            batch += int(rng.integers(0, 2))  # planned in increasing order, as the loader does
            cache.plan_many(keys, batch)
            for key in keys:
                model.plan(key, batch)
        elif op in (1, 2):
            read = int(rng.integers(max(0, batch - 3), batch + 1))
            got = cache.get_many(keys, read) if op == 1 else [cache.get(k, read) for k in keys]
            assert got == [model.get(k, read) for k in keys]
        else:
            items = [(k, bytes([k[1]]) * int(rng.integers(5, 15))) for k in keys]
            if op == 3:
                cache.put_many(items)
            else:
                for key, payload in items:
                    cache.put(key, payload)
            for key, payload in items:
                model.put(key, payload)
        assert all(k in cache for k in model.data) and len(cache) == len(model.data)
        assert cache.planned_bytes == sum(
            len(v) for k, v in model.data.items() if model.uses.get(k)
        )
        stats = cache.stats()
        assert (stats["cache_hits"], stats["cache_misses"]) == (model.hits, model.misses)
        assert (cache.evictions, cache.early_evictions) == (model.evictions, model.early)
    assert compactions > 10
