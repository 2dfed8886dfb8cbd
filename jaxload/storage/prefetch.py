"""Fetching ahead from the known order: each record a future batch reads is requested at
a moment chosen so that one pass over the dataset's bytes serves many batches.

The sample at every future global position is known ((seed, position) -> dataset,
episode, frame: `SampleStream.locate`), so before batch k is read, this process's next
batches (k + step, k + 2 step, ...; `step` is the number of worker processes, which
read batches round robin) up to a window of W batches are planned: their records go into
the cache's furthest-next-use bookkeeping, each with a time to fetch it.

The fetch times make a sweep. A sample-level shuffle scatters a batch's records over the
whole dataset, so requests either stay small (one per record: request overhead) or merge
across gaps (bytes nobody reads). The sweep makes merged requests dense: a virtual cursor
passes over the dataset's bytes once every P = W - L batches, and a record needed by batch
j is fetched when the cursor last passes it at least L batches (the lead, a few request
latencies) before j. Records fetched in one step then lie next to each other, so
merging them wastes little, while the cache only holds each record from its fetch to its
use (on average L + P/2 batches). The store sizes L and P (`RemoteStore.lookahead`): P as
long as the cache holds, found by watching it. Nothing here changes what a batch holds:
with or without it a batch reads the same verified records.

    lookahead = Lookahead(spec, datasets, step=max(1, num_workers))   # ReadBatch holds one
    reads = lookahead.before(k, positions)                  # before reading batch k
    dataset.read(mine, ReadHints(reads.plans.get(d), reads.contexts.get(d)))
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxload.storage.remote import ReadContext

# The most batches planned ahead, whatever the cache holds.
MAX_DEPTH = 1024
# The most read plans kept for the read (`JaxloadDataset.plan_read`; ~100 KB each for 256
# rows with windows): a long window's later batches work theirs out again when read.
MAX_PLANS = 64


@dataclasses.dataclass
class BatchReads:
    """What the lookahead knows of batch k when it is read: where its rows are (`located`,
    `stream.locate` of its positions, when planned ahead), each dataset's read plan made
    ahead (`plans`), and each remote dataset's `ReadContext` (the batch and the store's
    generation when the pipeline began)."""

    batch: int
    located: tuple[np.ndarray, np.ndarray] | None = None
    plans: dict[int, Any] = dataclasses.field(default_factory=dict)
    contexts: dict[int, ReadContext] = dataclasses.field(default_factory=dict)


class Lookahead:
    """Per process and pipeline: which future batches are planned, when each record is
    fetched, and the batch interval measured. The read stage (jaxload.stages.read_batch)
    holds one when a dataset of its spec is remote, and calls `before(k, ...)` ahead of
    reading batch k."""

    def __init__(self, spec: Any, datasets: Any, step: int):
        self.spec = spec  # its stream
        self.datasets = datasets  # `jaxload.episode_dataset.OpenedDatasets`: plans, stores
        self.step = max(1, int(step))
        self._lock = threading.Lock()
        self._planned_to: int | None = None  # last batch planned
        self._last_start: float | None = None
        self._interval: float | None = None
        # per remote dataset, the stored bytes a batch reads of it (measured): each store
        # sizes its sweep by its own cache and its own records (a mixture reads several)
        self._batch_bytes: dict[int, float] = {}
        self._due: list[tuple[int, int, int, list[tuple[int, int]]]] = []  # (at, seq, d, keys)
        self.located: dict[int, tuple[Any, Any]] = {}  # batch -> stream.locate, planned ahead
        self.plans: dict[tuple[int, int], Any] = {}  # (batch, dataset) -> its plan_read
        self._seq = itertools.count()
        # Each store's generation when this pipeline began (dataset -> generation): once a
        # store is closed (loader.close()), this pipeline's threads stop fetching.
        self.generations = {d: s.generation for d, s in self.stores()}

    def __getstate__(self) -> dict[str, Any]:
        # a worker process starts afresh
        return {"spec": self.spec, "datasets": self.datasets, "step": self.step}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"], state["datasets"], state["step"])

    def stores(self) -> list[tuple[int, Any]]:
        return list(self.datasets.stores.items())

    def before(self, k: int, positions: Callable[[int], np.ndarray]) -> BatchReads:
        """Batch k (its rows at `positions(k)`) is about to be read on this thread: plan
        ahead of it and fetch what is due; returns what is known of its reads."""
        stores, generations = self.stores(), self.generations
        for d, store in stores:  # a closed loader's thread still reading: stop here
            store.check_open(generations.get(d))
        with self._lock:
            now = time.monotonic()
            if self._last_start is not None:
                self._interval = _ema(self._interval, (now - self._last_start) * self.step)
            self._last_start = now
            if self._planned_to is None or self._planned_to < k:
                self._planned_to = k - self.step  # (re)start planning at k
                self._due.clear()
                self.located.clear()
                self.plans.clear()
            else:  # drop what was planned for batches another reader took, now and then
                # (list(dict) is one step under the GIL: readers pop entries meanwhile)
                if len(self.located) > 2 * MAX_DEPTH:
                    for j in [j for j in list(self.located) if j < k]:
                        self.located.pop(j, None)
                if len(self.plans) >= MAX_PLANS:
                    for jd in [jd for jd in list(self.plans) if jd[0] < k]:
                        self.plans.pop(jd, None)
            if not self._batch_bytes:  # first batch: measure what one batch reads
                lead, period, horizon = 0, 1, k
            else:
                known = self._batch_bytes
                guess = max(known.values())  # a dataset none of whose records were read yet
                marks = [s.lookahead(self._interval, known.get(d, guess)) for d, s in stores]
                lead = min(m[0] for m in marks)
                window = min(min(m[1] for m in marks), MAX_DEPTH)
                period, horizon = max(1, window - lead), k + window * self.step
            batches = list(range(self._planned_to + self.step, horizon + 1, self.step))
            self._planned_to = max(self._planned_to, horizon)
            self._plan(batches, positions, lead * self.step, period * self.step)
            due = self._pop_due(k)
        for d, store in stores:
            if due.get(d):
                store.prefetch(due[d], generations.get(d))
        plans = {}
        for d, _ in stores:
            plan = self.plans.pop((k, d), None)
            if plan is not None:
                plans[d] = plan
        return BatchReads(
            batch=k,
            located=self.located.pop(k, None),
            plans=plans,
            contexts={d: ReadContext(k, generations.get(d)) for d, _ in stores},
        )

    def _plan(
        self, batches: list[int], positions: Callable[[int], np.ndarray], lead: int, period: int
    ) -> None:
        """Plans the uses of `batches` in the caches and schedules each record's fetch."""
        stream, stores = self.spec.stream, self.stores()
        sizes: dict[int, float] = {}
        for j in batches:
            dataset_ids, located = self.located[j] = stream.locate(positions(j))
            for d, store in stores:
                mine = located[dataset_ids == d]
                if not len(mine):
                    continue
                plan = self.datasets[d].plan_read(mine)
                if len(self.plans) < MAX_PLANS:  # the rest are worked out again when read
                    self.plans[(j, d)] = plan
                keys = plan.record_keys()  # sorted, unique
                store.load_offsets(np.unique(keys[:, 0]).tolist())
                phases, nbytes = store.place(keys)
                sizes[d] = sizes.get(d, 0.0) + float(nbytes.sum())
                # One heap entry per fetch time, holding the keys due then.
                times = _fetch_time(j, lead, period, phases)
                order = np.argsort(times, kind="stable")
                times, keys = times[order], keys[order]
                pairs = list(zip(keys[:, 0].tolist(), keys[:, 1].tolist(), strict=True))
                store.cache.plan_many(pairs, j)
                if not pairs:
                    continue
                cuts = [0, *(np.flatnonzero(np.diff(times)) + 1).tolist(), len(pairs)]
                for begin, end in itertools.pairwise(cuts):
                    entry = (int(times[begin]), next(self._seq), d, pairs[begin:end])
                    heapq.heappush(self._due, entry)
        if batches:
            known = self._batch_bytes
            for d, total in sizes.items():
                known[d] = max(known.get(d, 1.0), total / len(batches))

    def _pop_due(self, k: int) -> dict[int, list[tuple[int, int]]]:
        due: dict[int, list[tuple[int, int]]] = {}
        while self._due and self._due[0][0] <= k:
            _, _, d, keys = heapq.heappop(self._due)
            due.setdefault(d, []).extend(keys)
        return due


def _fetch_time(use: int, lead: int, period: int, phase: Any) -> Any:
    """The last batch at or before `use - lead` at which the sweep's cursor (one pass over
    the dataset every `period` batches) is at `phase` (0..1, a float or an array) of the
    dataset's bytes."""
    latest = use - lead
    offset = np.floor(np.asarray(phase) * period).astype(np.int64)
    return latest - ((latest - offset) % period)


def _ema(previous: float | None, value: float, weight: float = 0.2) -> float:
    return value if previous is None else (1 - weight) * previous + weight * value


__all__ = ["BatchReads", "Lookahead"]
