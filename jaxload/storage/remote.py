"""Reading a dataset in object storage (s3://, gs://, hf://, https://) by byte range.

No shard is downloaded whole. Each shard of a format-4 dataset has a record offset index
beside it (`layout.offsets_path`), so a record is one byte range of its shard
(`jaxload.format.chunks`); the records a read (or a planned batch) needs are grouped per
shard, ranges closer than `coalesce_bytes` merged into one request, and the requests
issued concurrently. Every record is decoded and verified against its position-keyed
xxh3 checksum, exactly as local reads are, then kept in a byte-budget `RecordCache`
that evicts by furthest next use (`jaxload.storage.prefetch` plans the uses from the
loader's known future order). Transient transport errors are retried under the
converter's `RetryPolicy`; a missing object, a denied access or any other error fails at
once with the object's URL in the message.

    store = RemoteStore("s3://bucket/ds", info, RemoteOptions(cache_bytes=1 << 30))
    payloads = store.read(shard=0, records=[17, 18])
    store.stats()   # requests, bytes fetched, cache hit rate, latency, ...
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.errors import CorruptRecordError, DatasetChangedError, DatasetError
from jaxload.format import chunks, layout
from jaxload.format.layout import DatasetInfo
from jaxload.storage.cache import DiskPayloads, RecordCache
from jaxload.storage.coalesce import coalesce
from jaxload.storage.flight import Flight
from jaxload.storage.options import RemoteOptions
from jaxload.storage.ranges import open_ranges
from jaxload.storage.retry import RemoteError, RetryCounter, call_with_retries, past_the_end
from jaxload.storage.stats_board import StatsBoard, combine, progress_line
from jaxload.storage.sweep import SweepPeriod, too_small
from jaxload.storage.urls import filesystem, join

log = logging.getLogger("jaxload.storage")

RETRY_LOG_S = 10.0  # seconds between retry warnings of one dataset (the others: DEBUG)

# The batch a thread is reading (set by jaxload.storage.prefetch around each batch): reads
# consume that batch's planned uses in the cache. And the generation of each store
# (id(store) -> generation) its pipeline began in: a pipeline whose store was closed since
# (loader.close()) fetches nothing more.
CURRENT = threading.local()

Key = tuple[int, int]  # (shard, record)
Request = tuple[int, int, int, list[int], Flight]  # shard, start, end, records, their flight


class RemoteStore:
    """Verified records of one remote dataset, fetched by byte range (one per process).

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
                f"{url}: format_version {info.format_version} has no record offset index, "
                f"which reading from object storage needs (format {layout.OFFSETS_VERSION}); "
                "reconvert it with this jaxload, or read a local copy"
            )
        self.url, self.info, self.describe = url, info, describe
        self.options = RemoteOptions.of(options)
        if self.options.cache_dir is not None:
            DiskPayloads.check(self.options.cache_dir)
        self.storage_options = dict(storage_options or {})
        self.board: StatsBoard | None = None  # set by a loader whose workers read
        self._setup()

    def _setup(self) -> None:
        self._ranges: Any = None  # jaxload.storage.ranges: how byte ranges are fetched
        self._lock = threading.Lock()
        self._offsets: dict[int, np.ndarray] = {}
        self._inflight: dict[Key, Flight] = {}
        self._pool: cf.ThreadPoolExecutor | None = None
        self._generation = 0  # close() bumps it: requests queued before then are dropped
        self.cache = RecordCache(self.options.cache_bytes, self.options.cache_dir)
        self._checked_version = False
        self._cache_failed = False  # a cache write failed (said once)
        self._small_cache_said = False  # sweep.too_small
        self._counts = dict.fromkeys(("requests", "bytes_fetched", "records_fetched", "waits"), 0)
        self._retries = RetryCounter()
        self._retry_quiet_until, self._retries_silenced = 0.0, 0  # _warn_retry
        self._latency_s: float | None = None  # moving average per request
        self._sweep = SweepPeriod()
        self._period_used: int | None = None  # the sweep's period last used (stats)
        self._sized = (0, 0)  # (shards whose offsets are loaded, their bytes): _dataset_bytes
        self._bandwidth: float | None = None  # bytes/s of large requests, moving average
        self._started = time.monotonic()
        self._logged = self._started

    def __getstate__(self) -> dict[str, Any]:
        keep = ("url", "info", "describe", "options", "storage_options", "board")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    # --- plumbing ----------------------------------------------------------------------

    def ranges(self) -> Any:
        with self._lock:
            if self._ranges is None:
                fs, root = filesystem(self.url, self.storage_options, self.options.timeout_s)
                options = self.options
                self._ranges = open_ranges(
                    fs, root, self.url, options.concurrency, options.signed_urls, options.timeout_s
                )
            return self._ranges

    def pool(self) -> cf.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(
                    self.options.concurrency, thread_name_prefix="jaxload-fetch"
                )
            return self._pool

    def _get(
        self,
        relative: str,
        start: int | None = None,
        end: int | None = None,
        generation: int | None = None,
    ) -> bytes:
        """Bytes of one object (or a range of it), retried (until close(), for a request
        of `generation`); timed for the estimates."""
        ranges = self.ranges()
        began = time.monotonic()

        def closed() -> bool:
            return generation is not None and generation != self._generation

        def attempt() -> bytes:
            if closed():
                raise DatasetError(f"{self.url}: closed while fetching {relative}")
            try:
                return ranges.get(relative, start, end)
            except Exception:
                if not closed():
                    raise
            # Closed meanwhile (the server may be gone too): neither retried nor logged.
            # Raised outside the handler: a transport error as its context would be retried.
            raise DatasetError(f"{self.url}: closed while fetching {relative}")

        data = call_with_retries(
            attempt,
            what=join(self.url, relative) + ("" if start is None else f" bytes {start}..{end}"),
            policy=self.options.retry,
            counter=self._retries,
            missing=f"dataset {self.url}",
            warn=self._warn_retry,
        )
        self._measured(time.monotonic() - began, len(data))
        return data

    def _warn_retry(self, message: str, *args: Any) -> None:
        """One retry warning per RETRY_LOG_S for this dataset, the others at DEBUG: in an
        outage every range in flight retries (about 20 warnings at once otherwise)."""
        now = time.monotonic()
        with self._lock:
            loud = now >= self._retry_quiet_until
            if loud:
                silenced, self._retries_silenced = self._retries_silenced, 0
                self._retry_quiet_until = now + RETRY_LOG_S
            else:
                self._retries_silenced += 1
        if not loud:
            log.debug(message, *args)
            return
        more = f" ({silenced} more retries of its requests before this one)" if silenced else ""
        log.warning(message + "%s", *args, more)

    def _measured(self, seconds: float, size: int) -> None:
        with self._lock:
            self._counts["requests"] += 1
            self._counts["bytes_fetched"] += size
            # The latency estimate comes from small requests, bandwidth from large ones.
            if size < 256 << 10:
                self._latency_s = _ema(self._latency_s, seconds)
            elif seconds > 0:
                spent = max(seconds - (self._latency_s or 0.0), seconds / 4)
                self._bandwidth = _ema(self._bandwidth, size / spent)

    def check_version(self) -> None:
        """DatasetChangedError when info.json at the URL is no longer the opened dataset."""
        import json

        raw = json.loads(self._get(layout.INFO_PATH))
        now = str(raw.get("fingerprint"))
        if now != self.info.fingerprint:
            raise DatasetChangedError(
                f"{self.url}: the dataset in storage is another version than the one opened "
                f"(fingerprint {now[:12]}..., opened {self.info.fingerprint[:12]}...); reopen "
                "it (and start a new run: a checkpoint of this one cannot resume there)"
            )
        self._checked_version = True

    def offsets(self, shard: int) -> np.ndarray:
        """Shard `shard`'s record offsets (fetched once, checked against info.json)."""
        found = self._offsets.get(shard)
        if found is not None:
            return found
        from xxhash import xxh3_64_hexdigest

        if not self._checked_version:
            self.check_version()
        relative = layout.offsets_path(shard)
        data = self._get(relative)
        expected_count = self.info.shard_records[shard] + 1
        if (
            xxh3_64_hexdigest(data) != self.info.offsets_xxh3[shard]
            or len(data) != expected_count * chunks.OFFSET_DTYPE.itemsize
        ):
            raise CorruptRecordError(
                f"{join(self.url, relative)}: does not match its checksum in "
                f"{layout.INFO_PATH}; the dataset in storage is damaged (upload it again)"
            )
        offsets = np.frombuffer(data, chunks.OFFSET_DTYPE).astype(np.int64)
        self._offsets[shard] = offsets
        return offsets

    def load_offsets(self, shards: Iterable[int]) -> None:
        """Fetches the offset indexes of `shards` not loaded yet, concurrently."""
        if len(self._offsets) == self.info.num_shards:
            return  # all loaded: the usual case, once per batch
        missing = sorted({int(s) for s in shards} - self._offsets.keys())
        if not self._checked_version and missing:
            self.check_version()
        for future in [self.pool().submit(self.offsets, s) for s in missing]:
            future.result()

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

    # --- estimates ---------------------------------------------------------------------

    @property
    def latency_s(self) -> float:
        return self._latency_s if self._latency_s is not None else 0.05

    @property
    def bandwidth(self) -> float:
        return self._bandwidth if self._bandwidth is not None else 100e6

    def coalesce_bytes(self) -> int:
        """Gap under which two ranges become one request: a gap costs gap/bandwidth, a
        request its latency."""
        if self.options.coalesce_bytes is not None:
            return int(self.options.coalesce_bytes)
        return int(min(8 << 20, max(64 << 10, self.latency_s * self.bandwidth)))

    # --- reading -----------------------------------------------------------------------

    def read(self, shard: int, records: Sequence[int], batch: int | None = None) -> list[bytes]:
        """The verified payloads of `records` of `shard`, from the cache, a fetch in flight
        or new requests (coalesced, concurrent)."""
        keys = [(int(shard), int(r)) for r in records]
        batch = getattr(CURRENT, "batch", None) if batch is None else batch
        out = self.cache.get_many(keys, batch)
        absent = [i for i, data in enumerate(out) if data is None]
        if absent:
            with self._lock:
                flights = [(i, self._inflight.get(keys[i])) for i in absent]
            self._counts["waits"] += sum(f is not None for _, f in flights)
            missing = [keys[i] for i, f in flights if f is None]
            if missing:
                generations = getattr(CURRENT, "generations", None) or {}
                fetched = self.fetch(missing, generations.get(id(self)))
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
        offsets = self._offsets[shard]
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
        gap, most = self.coalesce_bytes(), self.options.max_request_bytes
        return coalesce(keys, self._offsets, gap, most)

    def _fetch_range(self, request: Request, generation: int) -> None:
        shard, start, end, records, _ = request
        if generation != self._generation:
            return  # queued before close(): its flight has failed already
        payloads: dict[Key, bytes] = {}
        error: BaseException | None = None
        try:
            try:
                data = self._get(layout.shard_path(shard), start, end, generation)
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
            offsets, index = self._offsets[shard], np.asarray(records)
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
            payload = layout.unseal_record(stored, self.info.record_seed, shard, record)
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
            counts = dict(self._counts, retries=self._retries.retries)
        return {
            "url": self.url,
            **counts,
            **self.cache.stats(),
            "latency_ms": round(self.latency_s * 1000, 2),
            "bandwidth_mb_s": round(self.bandwidth / 1e6, 1),
            "coalesce_bytes": self.coalesce_bytes(),
            "sweep_period": self._period_used,
            "transport": getattr(self._ranges, "kind", None),
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
        """(lead, window) in batches for the sweep of `jaxload.storage.prefetch`, asked
        once per batch read. The lead covers three request latencies at the measured batch
        interval where half the cache holds that, else 1.3 where the cache holds more: a
        record fetched later is in flight when its batch needs it (at 50 ms and a 10%
        cache, half the cache gave 3 batches, 45 ms; 5 halved the waits, +3.5-5% samples/s
        in paired runs); the rest of the window, the sweep's period P, is as long as the cache
        holds (`jaxload.storage.sweep`), and at most the batches that read the dataset's
        bytes twice: a longer sweep saves no bytes (a cache that large keeps what passes),
        and planning that far ahead cost a cache larger than a small dataset a second of
        planning 1,024 batches before its second batch."""
        if not self._small_cache_said:  # once: each batch asks
            small = too_small(self.cache.budget_bytes, batch_bytes, self._dataset_bytes())
            self._small_cache_said = small is not None
            if small:
                log.warning("%s: %s", self.url, small)
        fits = max(2.0, 0.8 * self.cache.budget_bytes / max(batch_bytes, 1.0))
        interval = batch_interval_s if batch_interval_s else 0.01
        latencies = self.latency_s / max(interval, 1e-3)  # in batches
        roomy = min(math.ceil(3 * latencies) + 1, int(fits) // 2)
        lead = min(max(1, roomy, min(math.ceil(1.3 * latencies), int(fits) - 1)), 512)
        if self.options.lookahead is not None:
            window = max(1, int(self.options.lookahead))
            return min(lead, max(1, window // 2)), window
        period = self._sweep.update(self.cache, fits, lead, in_flight=math.floor(latencies))
        twice = 2 * self._dataset_bytes() / max(batch_bytes, 1.0)
        self._period_used = math.ceil(twice) if twice < period else period
        return lead, lead + self._period_used

    def _dataset_bytes(self) -> float:
        """The bytes of the dataset's shards: those whose offsets are loaded, the others
        taken as their mean (summed again only when more shards are loaded: this runs
        once per batch, and a large dataset has thousands of shards)."""
        loaded = list(self._offsets.values())
        if len(loaded) != self._sized[0]:
            self._sized = (len(loaded), sum(int(o[-1]) for o in loaded))
        count, total = self._sized
        return self.info.num_shards * total / count if count else math.inf

    def place(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For (shard, record) rows `keys` (offsets loaded): where each record lies in the
        dataset's bytes, 0..1 (shards in order), and its size in bytes."""
        phases = np.empty(len(keys))
        sizes = np.empty(len(keys), np.int64)
        for shard in np.unique(keys[:, 0]).tolist():
            rows = np.flatnonzero(keys[:, 0] == shard)
            offsets = self._offsets[shard]
            begin = offsets[keys[rows, 1]]
            sizes[rows] = offsets[keys[rows, 1] + 1] - begin
            phases[rows] = (shard + begin / max(1, int(offsets[-1]))) / self.info.num_shards
        return phases, sizes

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


def _ema(previous: float | None, value: float, weight: float = 0.2) -> float:
    return value if previous is None else (1 - weight) * previous + weight * value
