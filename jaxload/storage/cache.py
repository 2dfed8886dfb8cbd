"""A byte-budget cache of verified records that evicts by furthest next use.

The loader knows every future global position, so it knows when each record will be
read next: the record whose next use lies furthest ahead (or that no planned batch
needs) goes first. That is Belady's optimal policy, not an estimate of it; records no
planned batch needs are evicted least recently used first.

    cache = RecordCache(budget_bytes=64 << 20)
    cache.plan(("shard", 0, 17), batch=12)       # batch 12 will read record 17 of shard 0
    cache.put(("shard", 0, 17), payload)
    cache.get(("shard", 0, 17), batch=12)        # payload (a hit); next use: none planned

It also says how full it runs, for the lookahead to size itself by: `planned_bytes` (cached
records a planned batch has yet to read; its peak through `take_peak_planned`) and
`early_evictions` (records evicted before their planned read: the budget was too small for
what was fetched ahead).

Records live in memory, or with `directory` in files under it (a budget larger than
RAM: `RemoteOptions(cache_dir=...)`), each file checked against the xxh3 of what was put
when read back; a file that fails the check is a miss, fetched again, never returned.

`simulate` replays an access sequence under this policy or LRU at the same budget
(benchmarks/bench_remote.py compares them on a loader's real future order).
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import logging
import os
import threading
import weakref
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from jaxload.storage.scratch import owned_directory, remove_owned

NEVER = 1 << 62  # next use of a record no planned batch reads

log = logging.getLogger(__name__)


class MemoryPayloads(dict):
    """Cached records in memory: key -> bytes."""

    def size(self, key: Hashable) -> int:
        return len(self[key])

    def close(self) -> None:
        self.clear()


class DiskPayloads:
    """Cached records as files in a directory of this process under `root`, removed on
    close (and, if the process died, by the next process that opens a cache there). Each
    file is checked against the xxh3 of the bytes put when read back."""

    def __init__(self, root: str | os.PathLike):
        self.root = os.fspath(root)
        self.directory: str | None = None  # made at the first put: a process that never
        # caches (the main one, when worker processes read) makes no directory of its own
        self._remove: weakref.finalize | None = None
        self._index: dict[Hashable, tuple[int, int, str]] = {}  # key -> (size, xxh3, file)
        self._names = itertools.count()
        self.damaged = 0  # files that failed their check when read back

    @staticmethod
    def check(root: str | os.PathLike) -> None:
        """Raises ValueError naming `root` when no cache can be made under it (a file
        there, no permission): said when the dataset is opened, instead of a cache that
        stays empty while every record is fetched again for each use."""
        root = os.fspath(root)
        if os.path.exists(root) and not os.path.isdir(root):
            raise ValueError(f"RemoteOptions(cache_dir={root!r}): not a directory")
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as e:
            raise ValueError(
                f"RemoteOptions(cache_dir={root!r}): cannot make the directory ({e.strerror or e})"
            ) from e
        if not os.access(root, os.W_OK | os.X_OK):
            raise ValueError(f"RemoteOptions(cache_dir={root!r}): cannot write there")

    def _directory(self) -> str:
        if self.directory is None:
            self.directory = owned_directory("jaxload-cache", self.root)
            self._remove = weakref.finalize(self, remove_owned, self.directory)
        return self.directory

    def __contains__(self, key: Hashable) -> bool:
        return key in self._index

    def __len__(self) -> int:
        return len(self._index)

    def size(self, key: Hashable) -> int:
        return self._index[key][0]

    def __setitem__(self, key: Hashable, data: bytes) -> None:
        from xxhash import xxh3_64_intdigest

        path = os.path.join(self._directory(), str(next(self._names)))
        try:
            _write(path, data)
        except FileNotFoundError:  # the directory was removed (a /tmp cleaner): again
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write(path, data)
        self._index[key] = (len(data), xxh3_64_intdigest(data), path)

    def get(self, key: Hashable) -> bytes | None:
        from xxhash import xxh3_64_intdigest

        entry = self._index.get(key)
        if entry is None:
            return None
        size, digest, path = entry
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            data = b""
        if len(data) != size or xxh3_64_intdigest(data) != digest:
            self.damaged += 1
            if self.damaged == 1:  # a damaged disk damages many: the rest are counted
                log.warning(
                    "cache file %s changed on disk; fetching its record again (further ones "
                    "are counted in loader.stats: cache_damaged)",
                    path,
                )
            self.pop(key)
            return None
        return data

    def pop(self, key: Hashable) -> None:
        _, _, path = self._index.pop(key)
        with contextlib.suppress(OSError):
            os.unlink(path)

    def close(self) -> None:
        self._index.clear()
        if self._remove is not None:
            self._remove()
        self.directory = self._remove = None  # a later put makes a new one


def _write(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError:  # a full disk: no partial file left behind
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


class RecordCache:
    """Thread-safe map key -> bytes under `budget_bytes`, evicting by furthest next use;
    in memory, or in files under `directory`.

    Bookkeeping, per record: its planned uses (an int, or a deque when several batches
    read it), and one live entry, in a heap by next use or, once no planned batch reads
    it (most records, after their one read), in a queue in the order they were last
    touched: those go first, least recently touched first. A touch adds a new entry and
    leaves the old one stale (skipped, and dropped now and then)."""

    COMPACT_SLACK = 1024  # stale entries tolerated beyond one per live record

    def __init__(self, budget_bytes: int, directory: str | os.PathLike | None = None):
        self.budget_bytes = int(budget_bytes)
        self._data: MemoryPayloads | DiskPayloads = (
            MemoryPayloads() if directory is None else DiskPayloads(directory)
        )
        self._uses: dict[Hashable, int | collections.deque[int]] = {}
        self._heap: list[tuple[int, int, Hashable]] = []  # (-next use, seq, key)
        self._unplanned: collections.deque[tuple[int, Hashable]] = collections.deque()
        self._entry: dict[Hashable, int] = {}  # key -> seq of its live entry
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.early_evictions = 0  # evicted while a planned batch still needed them
        self.planned_bytes = 0  # cached bytes some planned batch still reads
        self._peak_planned = 0
        self.epoch = 0  # close() calls so far: a put from before one is dropped

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def plan(self, key: Hashable, batch: int) -> None:
        """Batch `batch` will read `key` (batches are planned in increasing order)."""
        self.plan_many([key], batch)

    def plan_many(self, keys: Iterable[Hashable], batch: int) -> None:
        """Batch `batch` will read each of `keys`."""
        with self._lock:
            uses_of, data = self._uses, self._data
            for key in keys:
                uses = uses_of.get(key)
                if uses is None:
                    uses_of[key] = batch
                    if key in data:  # was unplanned: now read next by `batch`
                        self.planned_bytes += data.size(key)
                        self._push(key)
                elif type(uses) is int:
                    if uses != batch:
                        uses_of[key] = collections.deque((uses, batch))
                elif uses[-1] != batch:
                    uses.append(batch)
            self._peak_planned = max(self._peak_planned, self.planned_bytes)

    def next_use(self, key: Hashable) -> int:
        uses = self._uses.get(key)
        if uses is None:
            return NEVER
        return uses if type(uses) is int else uses[0]

    def get(self, key: Hashable, batch: int | None = None) -> bytes | None:
        """The cached bytes or None; counts a hit or a miss. `batch`: the batch reading it
        (its planned uses up to that batch are consumed)."""
        with self._lock:
            return self._get(key, batch)

    def _get(self, key: Hashable, batch: int | None) -> bytes | None:
        if batch is not None:
            self._consume(key, batch)
        size = self._data.size(key) if key in self._data else None
        data = self._data.get(key) if size is not None else None
        if data is None:
            self.misses += 1
            if size is not None:  # a cache file that failed its check: dropped
                self.bytes -= size
                self._entry.pop(key, None)
                if key in self._uses:
                    self.planned_bytes -= size
            return None
        self.hits += 1
        self._push(key)
        return data

    def get_many(self, keys: Sequence[Hashable], batch: int | None = None) -> list[bytes | None]:
        """`get` of each of `keys`, under one lock (in memory; files are read one lock
        each, so that the fetch threads' puts do not wait for a batch of reads)."""
        if isinstance(self._data, DiskPayloads):
            return [self.get(key, batch) for key in keys]
        with self._lock:
            return self._get_many_in_memory(keys, batch)

    def _get_many_in_memory(
        self, keys: Sequence[Hashable], batch: int | None
    ) -> list[bytes | None]:
        """`_get` of each key, inlined (`_consume`, `_push`): a batch reads ~100 records,
        under the GIL, which the other readers' decoders wait for."""
        data, uses_of, entry, seq = self._data, self._uses, self._entry, self._seq
        heap, unplanned = self._heap, self._unplanned
        out: list[bytes | None] = []
        for key in keys:
            payload = data.get(key)
            uses = uses_of.get(key)
            if uses is not None and batch is not None:
                if type(uses) is not int:
                    while uses and uses[0] <= batch:
                        uses.popleft()
                if (uses <= batch) if type(uses) is int else not uses:
                    del uses_of[key]
                    uses = None
                    if payload is not None:
                        self.planned_bytes -= len(payload)
            out.append(payload)
            if payload is not None:
                entry[key] = n = next(seq)
                if uses is None:
                    unplanned.append((n, key))
                else:
                    heapq.heappush(heap, (-(uses if type(uses) is int else uses[0]), n, key))
        found = len(out) - out.count(None)
        self.hits += found
        self.misses += len(out) - found
        if len(heap) + len(unplanned) > 2 * len(entry) + self.COMPACT_SLACK:
            self._compact()
        return out

    def peek(self, key: Hashable) -> bytes | None:
        """The cached bytes or None, without counting a hit or a miss."""
        with self._lock:
            return self._data.get(key)

    def close(self) -> None:
        """Drops every record (and a disk cache's directory)."""
        with self._lock:
            self._data.close()
            self._heap.clear()
            self._unplanned.clear()
            self._entry.clear()
            self.bytes = self.planned_bytes = self._peak_planned = 0
            self.epoch += 1

    def put(self, key: Hashable, data: bytes) -> None:
        """Stores `data`, then evicts the furthest-next-use entries (maybe this one) until
        the cache fits its budget."""
        with self._lock:
            self._put(key, data)

    def put_many(self, items: Iterable[tuple[Hashable, bytes]], epoch: int | None = None) -> None:
        """`put` of each (key, data), under one lock in memory (files: one lock each).
        With `epoch` (read before the data was fetched), nothing is put once close() has
        emptied the cache since: a fetch that lands after close() would fill it (and a
        `cache_dir`) again."""
        if isinstance(self._data, DiskPayloads):
            for key, data in items:
                with self._lock:
                    if epoch is not None and epoch != self.epoch:
                        return
                    self._put(key, data)
            return
        with self._lock:
            if epoch is not None and epoch != self.epoch:
                return
            for key, data in items:
                self._put(key, data)

    def _put(self, key: Hashable, data: bytes) -> None:
        if key in self._data:
            return
        self._data[key] = data
        self.bytes += len(data)
        if key in self._uses:
            self.planned_bytes += len(data)
        self._push(key)
        while self.bytes > self.budget_bytes and (self._unplanned or self._heap):
            if self._unplanned:  # never read again: first, least recently touched first
                seq, victim = self._unplanned.popleft()
            else:
                _, seq, victim = heapq.heappop(self._heap)
            if self._entry.get(victim) != seq:
                continue  # stale: the key was touched or evicted since
            del self._entry[victim]
            size = self._data.size(victim)
            self.bytes -= size
            self._data.pop(victim)
            self.evictions += 1
            if victim in self._uses:
                self.planned_bytes -= size
                self.early_evictions += 1
        self._peak_planned = max(self._peak_planned, self.planned_bytes)

    def room(self) -> int:
        """Bytes that can be put without evicting anything."""
        return self.budget_bytes - self.bytes

    def take_peak_planned(self) -> int:
        """The most `planned_bytes` since the last call (then starts over from now)."""
        with self._lock:
            peak, self._peak_planned = self._peak_planned, self.planned_bytes
            return peak

    def _consume(self, key: Hashable, batch: int) -> None:
        uses = self._uses.get(key)
        if uses is None:
            return
        if type(uses) is int:
            done = uses <= batch
        else:
            while uses and uses[0] <= batch:
                uses.popleft()
            done = not uses
        if done:
            del self._uses[key]
            if key in self._data:
                self.planned_bytes -= self._data.size(key)

    def _push(self, key: Hashable) -> None:
        """A new live entry for `key` at its next use (its old entry goes stale)."""
        seq = next(self._seq)
        self._entry[key] = seq
        next_use = self.next_use(key)
        if next_use == NEVER:
            self._unplanned.append((seq, key))
        else:
            heapq.heappush(self._heap, (-next_use, seq, key))
        if len(self._heap) + len(self._unplanned) > 2 * len(self._entry) + self.COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Drops stale entries (now and then: each touch adds a new one)."""
        live = self._entry
        self._heap = [e for e in self._heap if live.get(e[2]) == e[1]]
        heapq.heapify(self._heap)
        self._unplanned = collections.deque(e for e in self._unplanned if live.get(e[1]) == e[0])

    def stats(self) -> dict[str, Any]:
        total = self.hits + self.misses
        return {
            "cache_bytes": self.bytes,
            "cache_budget_bytes": self.budget_bytes,
            "cache_records": len(self._data),
            "cache_hits": self.hits,
            "cache_misses": self.misses,
            "cache_hit_rate": self.hits / total if total else 0.0,
            "cache_evictions": self.evictions,
            "cache_early_evictions": self.early_evictions,
            "cache_damaged": getattr(self._data, "damaged", 0),
        }


def simulate(
    accesses: Sequence[Hashable], sizes: Mapping[Hashable, int], budget_bytes: int, policy: str
) -> dict[str, float]:
    """Replays `accesses` through a cache of `budget_bytes` under `policy` ("optimal":
    furthest next use, knowing the whole sequence; "lru"). Returns hit rates by count and
    by bytes, and the bytes fetched (misses)."""
    hits = hit_bytes = miss_bytes = 0
    if policy == "optimal":
        following = [len(accesses)] * len(accesses)
        last: dict[Hashable, int] = {}
        for i in range(len(accesses) - 1, -1, -1):
            following[i] = last.get(accesses[i], NEVER)
            last[accesses[i]] = i
        cached: dict[Hashable, int] = {}  # key -> its live heap entry's next use
        heap: list[tuple[int, Hashable]] = []
        used = 0
        for i, key in enumerate(accesses):
            size = sizes[key]
            if key in cached:
                hits += 1
                hit_bytes += size
            else:
                miss_bytes += size
                used += size
            cached[key] = following[i]
            heapq.heappush(heap, (-following[i], key))
            while used > budget_bytes:
                negative, victim = heapq.heappop(heap)
                if cached.get(victim) != -negative:
                    continue
                del cached[victim]
                used -= sizes[victim]
    elif policy == "lru":
        order: collections.OrderedDict[Hashable, None] = collections.OrderedDict()
        used = 0
        for key in accesses:
            size = sizes[key]
            if key in order:
                hits += 1
                hit_bytes += size
                order.move_to_end(key)
                continue
            miss_bytes += size
            order[key] = None
            used += size
            while used > budget_bytes:
                victim, _ = order.popitem(last=False)
                used -= sizes[victim]
    else:
        raise ValueError(f"policy must be 'optimal' or 'lru', got {policy!r}")
    total_bytes = hit_bytes + miss_bytes
    return {
        "hit_rate": hits / len(accesses) if accesses else 0.0,
        "byte_hit_rate": hit_bytes / total_bytes if total_bytes else 0.0,
        "fetched_bytes": miss_bytes,
    }
