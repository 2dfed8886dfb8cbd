"""Fetching ahead from the known order: the records of the next batches of remote datasets
are requested before those batches are read.

The sample at every future global position is known ((seed, position) -> dataset,
episode, frame: `SampleStream.locate`), so before batch k is read, this process's next
batches (k + step, k + 2 step, ...; `step` is the number of worker processes, which
read batches round robin) are planned: their records go into the cache's furthest-next-use
bookkeeping and the missing ones are fetched, coalesced over the whole planned window.
Planning happens in rounds as large as the cache holds, started when the planned lead
falls below a few request latencies, so one round's requests span many batches. Nothing here changes what a batch holds: with or without it a batch reads the
same verified records.

    read = with_lookahead(ReadBatch(...), step=max(1, num_workers))   # loader.py does this
"""

from __future__ import annotations

import threading
import time
from typing import Any

from jaxload.storage import remote

# The most batches planned ahead, whatever the cache holds.
MAX_DEPTH = 1024


class Lookahead:
    """Per process: which future batches are planned, and the batch interval measured."""

    def __init__(self, read_batch: Any, step: int):
        self.read_batch = read_batch
        self.step = max(1, int(step))
        self._lock = threading.Lock()
        self._planned_to: int | None = None  # last batch planned
        self._last_start: float | None = None
        self._interval: float | None = None
        self._batch_bytes: float | None = None  # stored bytes a batch reads (measured)

    def __getstate__(self) -> dict[str, Any]:
        return {"read_batch": None, "step": self.step}  # rebuilt by LookaheadReadBatch

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["read_batch"], state["step"])

    def stores(self) -> list[tuple[int, Any]]:
        return [
            (d, ds.remote_store)
            for d, ds in enumerate(self.read_batch.datasets)
            if getattr(ds, "remote_store", None) is not None
        ]

    def before(self, k: int) -> None:
        """Batch k is about to be read on this thread: plan (and fetch) ahead of it."""
        remote.CURRENT.batch = k
        stores = self.stores()
        if not stores:
            return
        with self._lock:
            now = time.monotonic()
            if self._last_start is not None:
                self._interval = _ema(self._interval, (now - self._last_start) * self.step)
            self._last_start = now
            if self._batch_bytes is None:  # first batch: measure what one batch reads
                self._planned_to = k
                batches = [k]
            else:
                batches = self._next_round(k, stores)
        if batches:
            self._plan(batches, stores)

    def _next_round(self, k: int, stores: list[tuple[int, Any]]) -> list[int]:
        """The batches of the next planning round (none while the lead is enough)."""
        marks = [s.lookahead(self._interval, self._batch_bytes) for _, s in stores]
        low, depth = min(m[0] for m in marks), min(m[1] for m in marks)
        if self._planned_to is None or self._planned_to < k:
            self._planned_to = k - self.step  # (re)start planning at k
        # Plan in rounds: nothing until the lead falls below `low`, then up to `depth`.
        if self._planned_to >= k + low * self.step:
            return []
        horizon = k + min(depth, MAX_DEPTH) * self.step
        batches = list(range(self._planned_to + self.step, horizon + 1, self.step))
        self._planned_to = horizon
        return batches

    def _plan(self, batches: list[int], stores: list[tuple[int, Any]]) -> None:
        stream = self.read_batch.stream
        wanted: dict[int, list[tuple[int, int]]] = {d: [] for d, _ in stores}
        sizes = 0.0
        for j in batches:
            dataset_ids, positions = stream.locate(self.read_batch.positions(j))
            for d, store in stores:
                mine = positions[dataset_ids == d]
                if not len(mine):
                    continue
                keys = self.read_batch.datasets[d].record_keys(mine.tolist())
                for shard, record in keys.tolist():
                    store.cache.plan((shard, record), j)
                    wanted[d].append((shard, record))
        for d, store in stores:
            if wanted[d]:
                futures = store.fetch(wanted[d])
                sizes += _stored_bytes(store, futures)
        if batches:
            with self._lock:
                self._batch_bytes = max(self._batch_bytes or 1.0, sizes / len(batches))


def _stored_bytes(store: Any, futures: dict) -> float:
    total = 0
    for shard, record in futures:
        offsets = store.offsets(shard)
        total += int(offsets[record + 1] - offsets[record])
    return float(total)


def _ema(previous: float | None, value: float, weight: float = 0.2) -> float:
    return value if previous is None else (1 - weight) * previous + weight * value


def with_lookahead(read_batch: Any, step: int) -> Any:
    """`read_batch` itself when it reads no remote dataset, else the same transform (a
    `LookaheadReadBatch` sharing its state) that fetches ahead before each batch."""
    if not any(getattr(d, "remote_store", None) is not None for d in read_batch.datasets):
        return read_batch
    cls = type(read_batch)
    wrapped = _subclasses.get(cls)
    if wrapped is None:
        wrapped = _subclasses[cls] = type(f"Lookahead{cls.__name__}", (LookaheadMixin, cls), {})
        wrapped.__module__ = __name__
    out = cls.__new__(wrapped)
    out.__dict__.update(read_batch.__dict__)
    out.lookahead = Lookahead(out, step)
    return out


class LookaheadMixin:
    """Wraps `map(k)`: plan and fetch ahead of batch k, then read it."""

    lookahead: Lookahead

    def map(self, k: int) -> Any:
        if self.lookahead.read_batch is None:  # unpickled in a worker process
            self.lookahead.read_batch = self
        self.lookahead.before(int(k))
        try:
            return super().map(k)  # type: ignore[misc]
        finally:
            remote.CURRENT.batch = None

    def __reduce__(self) -> Any:
        base = type(self).__mro__[2]
        return (_rebuild, (base, self.__dict__))


def _rebuild(base: type, state: dict[str, Any]) -> Any:
    cls = _subclasses.get(base)
    if cls is None:
        cls = _subclasses[base] = type(f"Lookahead{base.__name__}", (LookaheadMixin, base), {})
        cls.__module__ = __name__
    out = base.__new__(cls)
    out.__dict__.update(state)
    out.lookahead.read_batch = out
    return out


_subclasses: dict[type, type] = {}


def remote_stats(datasets: list[Any]) -> dict[str, Any]:
    """Per remote dataset of this process: its store's counters (`RemoteStore.stats`)."""
    out = {}
    for ds in datasets:
        store = getattr(ds, "remote_store", None)
        if store is not None:
            out[ds.path] = store.stats()
    return out


__all__ = ["Lookahead", "remote_stats", "with_lookahead"]
