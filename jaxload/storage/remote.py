"""Reading a dataset in object storage (s3://, gs://, hf://, https://) by byte range.

No shard is downloaded whole. Each shard of a format-4 dataset has a record offset index
beside it (`jaxload.storage.offsets`), so a record is one byte range of its shard
(`jaxload.format.chunks`); the records a read (or a planned batch) needs are grouped per
shard, ranges closer than `coalesce_bytes` merged into one request, and the requests
issued concurrently (`jaxload.storage.transport`: retries, timing, counters). Every
record is decoded and verified against its position-keyed xxh3 checksum, exactly as
local reads are, then kept in a byte-budget `RecordCache` that evicts by furthest next
use (`jaxload.storage.prefetch` plans the uses from the loader's known future order;
`jaxload.storage.sweep` sizes how far ahead).

    store = RemoteStore("s3://bucket/ds", info, RemoteOptions(cache_bytes=1 << 30))
    payloads = store.read(shard=0, records=[17, 18])
    store.stats()   # requests, bytes fetched, cache hit rate, latency, ...
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.errors import CorruptRecordError, DatasetError
from jaxload.format import chunks, layout
from jaxload.format.layout import DatasetInfo
from jaxload.storage.cache import DiskPayloads, RecordCache
from jaxload.storage.coalesce import coalesce
from jaxload.storage.flight import Flight
from jaxload.storage.offsets import OffsetIndex
from jaxload.storage.options import RemoteOptions
from jaxload.storage.retry import RemoteError, past_the_end
from jaxload.storage.stats_board import StatsBoard, combine, progress_line
from jaxload.storage.sweep import SweepSchedule
from jaxload.storage.transport import Transport
from jaxload.storage.urls import join, redact

log = logging.getLogger("jaxload.storage")

Key = tuple[int, int]  # (shard, record)
Request = tuple[int, int, int, list[int], Flight]  # shard, start, end, records, their flight


@dataclasses.dataclass(frozen=True)
class ReadContext:
    """What a reader of a batch tells the store about a read: the batch (whose planned
    uses of the records the read consumes in the cache) and the store's generation when
    its pipeline began (a pipeline whose store was closed since fetches nothing more)."""

    batch: int | None = None
    generation: int | None = None


class RemoteStore:
    """Verified records of one remote dataset, fetched by byte range (one per process):
    a `Transport` (requests), an `OffsetIndex` (where records lie), a `RecordCache` and a
    `SweepSchedule` (what is kept, and how far ahead it is fetched).

    Picklable: a worker process reopens the filesystem and starts with an empty cache."""

    def __init__(
        self,
        url: str,
        info: DatasetInfo,
        options: RemoteOptions | Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        describe: Callable[[int, int], str] | None = None,
    ):
        indexed = len(info.offsets_xxh3) == info.num_shards
        if info.format_version < layout.OFFSETS_VERSION or not info.checked or not indexed:
            raise DatasetError(
                f"{redact(url)}: format_version {info.format_version} has no record offset index, "
                f"which reading from object storage needs (format {layout.OFFSETS_VERSION}); "
                "reconvert it with this jaxload, or read a local copy"
            )
        self.address = url  # where it is; messages, stats and logs name `url` (no credentials)
        self.url, self.info, self.describe = redact(url), info, describe
        self.options = RemoteOptions.of(options)
        if self.options.cache_dir is not None:
            DiskPayloads.check(self.options.cache_dir)
        self.storage_options = dict(storage_options or {})
        self.board: StatsBoard | None = None  # set by a loader whose workers read
        self._setup()

    def _setup(self) -> None:
        self.transport = Transport(self.address, self.options, self.storage_options)
        self.offsets = OffsetIndex(self.transport, self.info)
        self.cache = RecordCache(self.options.cache_bytes, self.options.cache_dir)
        self.schedule = SweepSchedule(self.url, self.options.lookahead)
        self._lock = threading.Lock()
        self._inflight: dict[Key, Flight] = {}
        self._pool: cf.ThreadPoolExecutor | None = None
        self._generation = 0  # close() bumps it: requests queued before then are dropped
        self._cache_failed = False  # a cache write failed (said once)
        self._counts = dict.fromkeys(("records_fetched", "waits"), 0)
        self._logged = time.monotonic()

    def __getstate__(self) -> dict[str, Any]:
        keep = ("address", "url", "info", "describe", "options", "storage_options", "board")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    # --- plumbing ----------------------------------------------------------------------

    def pool(self) -> cf.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(
                    self.options.concurrency, thread_name_prefix="jaxload-fetch"
                )
            return self._pool

    def check_version(self) -> None:
        """DatasetChangedError when info.json at the URL is no longer the opened dataset."""
        self.offsets.check_version()

    def load_offsets(self, shards: Iterable[int]) -> None:
        """Fetches the offset indexes of `shards` not loaded yet, concurrently."""
        self.offsets.load(shards, self.pool)

    @property
    def generation(self) -> int:
        """Bumped by `close()`: fetches asked for under an older one are not made."""
        return self._generation

    def closed_since(self, generation: int | None) -> bool:
        """Whether the store was closed (or restarted) after `generation` (None: never)."""
        return generation is not None and generation != self._generation

    def check_open(self, generation: int | None) -> None:
        """DatasetError when the store was closed after `generation` (None: never)."""
        if self.closed_since(generation):
            raise DatasetError(f"{self.url}: the loader reading this was closed")

    # --- reading -----------------------------------------------------------------------

    def read(
        self, shard: int, records: Sequence[int], context: ReadContext | None = None
    ) -> list[bytes]:
        """The verified payloads of `records` of `shard`, from the cache, a fetch in flight
        or new requests (coalesced, concurrent). `context`: the batch being read (its
        planned uses are consumed) and its pipeline's generation."""
        keys = [(int(shard), int(r)) for r in records]
        context = context or ReadContext()
        out = self.cache.get_many(keys, context.batch)
        absent = [i for i, data in enumerate(out) if data is None]
        if absent:
            with self._lock:
                flights = [(i, self._inflight.get(keys[i])) for i in absent]
            self._counts["waits"] += sum(f is not None for _, f in flights)
            missing = [keys[i] for i, f in flights if f is None]
            if missing:
                fetched = self.fetch(missing, context.generation)
                flights = [(i, f or fetched[keys[i]]) for i, f in flights]
            try:
                for i, flight in flights:
                    out[i] = flight.result(keys[i])
            except BaseException:
                if self.board is not None and not self.board.owner:
                    self.board.publish(self.url, self.stats())  # this worker may end here
                raise
        self._maybe_log()
        return out  # type: ignore[return-value]

    def fetch(self, keys: Iterable[Key], generation: int | None = None) -> dict[Key, Flight]:
        """Starts fetching `keys` not cached or in flight; returns each key's `Flight`.
        `generation`: the store's when the caller began; if closed since, DatasetError."""
        wanted = sorted(set(keys))
        self.load_offsets({s for s, _ in wanted})
        flights: dict[Key, Flight] = {}
        with self._lock:
            self.check_open(generation)  # under the lock: close() cannot come in between
            fresh = []
            for key in wanted:
                flight = self._inflight.get(key)
                if flight is None:
                    cached = self.cache.peek(key)
                    if cached is None:
                        fresh.append(key)
                        continue
                    flight = Flight.landed(key, cached)  # arrived since the caller looked
                flights[key] = flight
            requests, current = self._launch(fresh), self._generation
            flights.update((key, self._inflight[key]) for key in fresh)
        self._submit(requests, current)
        return flights

    def prefetch(self, keys: Iterable[Key], generation: int | None = None) -> None:
        """Starts fetching `keys` not cached or in flight (what `fetch` does, without a
        flight per key: the lookahead's path, once per batch); nothing if the store was
        closed after `generation`."""
        wanted = sorted(set(keys))
        self.load_offsets({s for s, _ in wanted})
        with self._lock:
            if self.closed_since(generation):
                return
            fresh = [k for k in wanted if k not in self._inflight and k not in self.cache]
            requests, current = self._launch(fresh), self._generation
        self._submit(requests, current)

    def _launch(self, keys: list[Key]) -> list[Request]:
        """The requests for `keys` (sorted; none cached or in flight), each widened to the
        records between them where the cache has room (`_with_gaps`), and its records
        registered in flight on one `Flight`. Under the lock, so that two threads never
        fetch the same records."""
        planned = [wide for request in self._requests(keys) for wide in self._with_gaps(request)]
        out = [(*request, Flight()) for request in planned]  # registered only once all exist
        for shard, _, _, records, flight in out:
            self._inflight.update(((shard, r), flight) for r in records)
        return out

    def _submit(self, requests: list[Request], generation: int) -> None:
        """Starts `requests` (their records registered in flight under `generation`; if
        close() came since, it failed them already and nothing is requested)."""
        for i, request in enumerate(requests):
            if generation != self._generation:
                return
            try:
                self.pool().submit(self._fetch_range, request, generation)
            except BaseException as error:  # e.g. at interpreter exit: no new threads
                for unstarted in requests[i:]:
                    self._land(unstarted, {}, error)
                if generation == self._generation:
                    raise
                return  # restart() shut the pool meanwhile: its error is the readers'

    def _with_gaps(self, request: tuple[int, int, int, list[int]]) -> list[tuple]:
        """`request` (shard, start, end, records) as requests that also name the records
        between the ones asked for (the merged range brings them anyway), when the cache
        has room for the whole range without evicting anything; split around records
        already cached or in flight, which it does not fetch again. Under the lock.

        A cache as large as the dataset then holds all of it after one pass: before, those
        records were dropped and fetched again by each later window (3x the dataset's
        bytes over the first epoch). A full cache, the usual case for a small budget, costs
        one comparison here."""
        shard, start, end, records = request
        if self.cache.room() < end - start:
            return [request]
        asked, runs, run = set(records), [], []
        for r in range(records[0], records[-1] + 1):
            if r in asked or ((shard, r) not in self._inflight and (shard, r) not in self.cache):
                run.append(r)
            elif run:
                runs.append(run)
                run = []
        runs.append(run)
        offsets = self.offsets.of(shard)
        return [(shard, int(offsets[run[0]]), int(offsets[run[-1] + 1]), run) for run in runs]

    def _land(
        self, request: Request, payloads: dict[Key, bytes], error: BaseException | None
    ) -> None:
        """Ends `request`: its verified `payloads` cached, its records no longer in flight,
        its readers given the payloads (and `error` for the others). Records a restart()
        took from it meanwhile are not cached: their readers got its error already."""
        shard, _, _, records, flight = request
        keys = [(shard, r) for r in records]
        try:
            with self._lock:
                mine = [k for k in keys if self._inflight.get(k) is flight]
                self._counts["records_fetched"] += len(payloads)
                epoch = self.cache.epoch  # close() restarts first: then `mine` is empty
            # cached before leaving the flight: a reader finds it in one
            self._keep([(key, payloads[key]) for key in mine if key in payloads], epoch)
        finally:  # whatever happened, no reader waits on this flight for ever
            with self._lock:
                for key in keys:
                    if self._inflight.get(key) is flight:
                        del self._inflight[key]
            flight.finish(payloads, error)

    def _requests(self, keys: Sequence[Key]) -> list[tuple[int, int, int, list[int]]]:
        """(shard, start, end, records) requests covering `keys` (sorted; `coalesce`)."""
        gap, most = self.transport.coalesce_bytes(), self.options.max_request_bytes
        return coalesce(keys, self.offsets.loaded, gap, most)

    def _fetch_range(self, request: Request, generation: int) -> None:
        shard, start, end, records, _ = request
        if generation != self._generation:
            return  # queued before close(): its flight has failed already
        payloads: dict[Key, bytes] = {}
        error: BaseException | None = None
        try:
            try:
                data = self.transport.get(
                    layout.shard_path(shard), start, end, lambda: self.closed_since(generation)
                )
            except RemoteError as e:  # a range wholly past the end: HTTP 416
                if not past_the_end(e):
                    raise
                data = b""
            if len(data) != end - start:
                self.check_version()  # another, shorter dataset there now: DatasetChangedError
                raise CorruptRecordError(
                    f"{join(self.url, layout.shard_path(shard))}: bytes {start}..{end} came back "
                    f"as {len(data)} bytes; the shard in storage is shorter than its index "
                    f"(dataset {self.url}); upload it again"
                )
            offsets, index = self.offsets.of(shard), np.asarray(records)
            view = memoryview(data)
            spans = zip(records, offsets[index].tolist(), offsets[index + 1].tolist())
            for record, first, last in spans:
                chunk = view[first - start : last - start]
                payloads[(shard, record)] = self._verify(shard, record, chunk, first)
        except BaseException as e:
            error = e
        self._land(request, payloads, error)

    def _keep(self, records: list[tuple[Key, bytes]], epoch: int) -> None:
        """Caches verified records unless close() came since `epoch`; a cache that cannot
        store them (a full disk under `cache_dir`) is said once and the read goes on
        without them: the readers waiting for the records still get them."""
        try:
            self.cache.put_many(records, epoch)
        except Exception as e:  # OSError, MemoryError, ...
            if not self._cache_failed:
                self._cache_failed = True
                log.warning(
                    "%s: cannot cache records in %s (%s); reading on, fetching them again "
                    "when needed",
                    self.url,
                    self.options.cache_dir,
                    e,
                )

    def _verify(self, shard: int, record: int, chunk: memoryview, begin: int) -> bytes:
        try:
            stored = chunks.decode_chunk(chunk, begin)
            payload = layout.unseal_record(stored, self.info.records_key, shard, record)
        except CorruptRecordError:
            payload = None
        if payload is None:
            where = f"{join(self.url, layout.shard_path(shard))}: record {record}"
            self.check_version()  # another dataset there now: DatasetChangedError
            what = f" ({self.describe(shard, record)})" if self.describe else ""
            raise CorruptRecordError(
                f"{where}{what} does not match its checksum: the object changed after "
                f"conversion or a byte range came back wrong (dataset {self.url}); upload it again"
            )
        return payload

    # --- progress ----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters and estimates of this process: requests, bytes, cache hit rate, ..."""
        with self._lock:
            counts = dict(self._counts)
        transport = self.transport
        return {
            "url": self.url,
            **transport.counts(),
            **counts,
            **self.cache.stats(),
            "latency_ms": round(transport.latency_s * 1000, 2),
            "bandwidth_mb_s": round(transport.bandwidth / 1e6, 1),
            "coalesce_bytes": transport.coalesce_bytes(),
            "sweep_period": self.schedule.period_used,
            "transport": transport.kind,
        }

    def _maybe_log(self) -> None:
        """After a read: a worker process has its counters published for its loader's
        process (which logs them added up: a worker's log lines would go nowhere); any
        other logs."""
        if self.board is None or self.board.owner:
            self.log_progress()
        else:
            self.board.keep_published(self.url, self)

    def log_progress(self) -> None:
        """A progress line (logger "jaxload.storage", INFO) when `log_every_s` has passed
        since the last: this process's counters and its worker processes' added up."""
        every, now = self.options.log_every_s, time.monotonic()
        if not every or now - self._logged < every:
            return
        self._logged = now
        workers = self.board.read(self.url) if self.board is not None else []
        log.info("%s: %s", self.url, progress_line(combine([self.stats(), *workers])))

    def lookahead(self, batch_interval_s: float | None, batch_bytes: float) -> tuple[int, int]:
        """(lead, window) in batches for the sweep of `jaxload.storage.prefetch`
        (`jaxload.storage.sweep.SweepSchedule.lookahead`), asked once per batch read."""
        return self.schedule.lookahead(
            self.cache,
            self.transport.latency_s,
            self.offsets.dataset_bytes(),
            batch_interval_s,
            batch_bytes,
        )

    def place(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where records `keys` lie in the dataset's bytes, and their sizes (`OffsetIndex.place`)."""
        return self.offsets.place(keys)

    def restart(self) -> None:
        """Drops what is in flight and keeps the cache: queued requests are dropped, the
        records in flight fail for whoever waits on them (requests already on the wire
        finish in the background and are discarded), and a pipeline begun before fetches
        nothing more (`check_open`). What a loader does to the pipeline it drops after a
        RemoteError: the next one fetches anew instead of waiting on a request of the
        failed one, which could raise that error again after the outage ended."""
        with self._lock:
            pool, self._pool = self._pool, None
            pending, self._inflight = self._inflight, {}
            self._generation += 1
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        dropped = DatasetError(f"{self.url}: closed while this record was being fetched")
        for flight in set(pending.values()):
            flight.finish({}, dropped)

    def close(self) -> None:
        """Stops fetching (`restart`) and empties the cache (its files under `cache_dir`
        removed). A later read starts again with an empty cache."""
        self.restart()
        self.cache.close()
