"""How a remote dataset's bytes are fetched: one object or byte range per call, retried
under `RemoteOptions.retry`, timed for the latency and bandwidth estimates that size
requests (`coalesce_bytes`) and the lookahead, and counted for `loader.stats`.

    transport = Transport("s3://bucket/ds", RemoteOptions(), {"anon": True})
    data = transport.get("data/shard-00000.array_record", 4096, 8192)
    transport.latency_s, transport.coalesce_bytes(), transport.counts()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from jaxload.errors import DatasetError
from jaxload.storage.options import RemoteOptions
from jaxload.storage.ranges import open_ranges
from jaxload.storage.retry import RetryCounter, call_with_retries
from jaxload.storage.urls import filesystem, join, redact

log = logging.getLogger("jaxload.storage")

RETRY_LOG_S = 10.0  # seconds between retry warnings of one dataset (the others: DEBUG)


class Transport:
    """Byte ranges of one remote dataset's objects, with retries, estimates and counters.

    Picklable: a worker process opens its own connections and starts counting afresh."""

    def __init__(self, url: str, options: RemoteOptions, storage_options: Mapping[str, Any]):
        self.address = url  # what requests go to; messages name `url` (no credentials)
        self.url, self.options, self.storage_options = redact(url), options, dict(storage_options)
        self._setup()

    def _setup(self) -> None:
        self._ranges: Any = None  # jaxload.storage.ranges: how byte ranges are fetched
        self._lock = threading.Lock()
        self._requests = self._bytes = 0
        self.retries = RetryCounter()
        self._retry_quiet_until, self._retries_silenced = 0.0, 0  # _warn_retry
        self._latency_s: float | None = None  # moving average per request
        self._bandwidth: float | None = None  # bytes/s of large requests, moving average

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in ("address", "url", "options", "storage_options")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def ranges(self) -> Any:
        with self._lock:
            if self._ranges is None:
                fs, root = filesystem(self.address, self.storage_options, self.options.timeout_s)
                options = self.options
                self._ranges = open_ranges(
                    fs, root, self.url, options.concurrency, options.signed_urls, options.timeout_s
                )
            return self._ranges

    @property
    def kind(self) -> str | None:
        """How ranges are fetched ("signed" or "fsspec"), once the first was."""
        return getattr(self._ranges, "kind", None)

    def get(
        self,
        relative: str,
        start: int | None = None,
        end: int | None = None,
        closed: Callable[[], bool] | None = None,
    ) -> bytes:
        """Bytes of one object (or the range [start, end) of it), retried until `closed()`
        says the reader gave up (then a DatasetError, neither retried nor logged)."""
        ranges = self.ranges()
        began = time.monotonic()

        def attempt() -> bytes | None:
            if closed is not None and closed():
                return None
            try:
                return ranges.get(relative, start, end)
            except Exception:
                if closed is None or not closed():
                    raise
            return None  # closed meanwhile (the server may be gone too): not retried

        data = call_with_retries(
            attempt,
            what=join(self.url, relative) + ("" if start is None else f" bytes {start}..{end}"),
            policy=self.options.retry,
            counter=self.retries,
            missing=f"dataset {self.url}",
            warn=self._warn_retry,
        )
        if data is None:  # raised here: call_with_retries would wrap it in a RemoteError
            raise DatasetError(f"{self.url}: closed while fetching {relative}")
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
            self._requests += 1
            self._bytes += size
            # The latency estimate comes from small requests, bandwidth from large ones.
            if size < 256 << 10:
                self._latency_s = _ema(self._latency_s, seconds)
            elif seconds > 0:
                spent = max(seconds - (self._latency_s or 0.0), seconds / 4)
                self._bandwidth = _ema(self._bandwidth, size / spent)

    def counts(self) -> dict[str, int]:
        """Requests made, bytes fetched and retries, in this process."""
        with self._lock:
            return {
                "requests": self._requests,
                "bytes_fetched": self._bytes,
                "retries": self.retries.retries,
            }

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


def _ema(previous: float | None, value: float, weight: float = 0.2) -> float:
    return value if previous is None else (1 - weight) * previous + weight * value
