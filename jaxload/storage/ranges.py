"""Byte ranges of a dataset's objects: through a presigned URL and a plain HTTP connection
pool where the store can sign one (s3://), else through fsspec.

Why two ways: on the two-core machine the benchmarks run on, a ranged GET through s3fs
(aiobotocore: signing, event hooks, response parsing) costs 4.4 ms of client CPU per
request and about 1 ms per MB; the same GET of a presigned URL through urllib3 costs 1.1 ms
and 0.35 ms per MB (benchmarks/RESULTS.md, "Remote reads"). The CPU a reader spends on
requests is CPU its decoders do not get. A presigned URL names one object and carries its
own credentials, so any HTTP client can fetch ranges of it; `SignedRanges` signs each
object once, re-signs it before the signature expires or when the store refuses it (403:
credentials rotated), and checks once, on the dataset's `meta/info.json`, that a signed
GET returns the bytes fsspec returns. If signing is not possible (no `sign` for the
scheme, or credentials that cannot presign) or that check fails, `FsspecRanges` is used.
Neither way changes what is read: every record is verified against its checksum after.

    ranges = open_ranges(fs, root, "s3://bucket/ds")
    data = ranges.get("shards/shard-00000.arrayrecord", 4096, 8192)
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from jaxload.errors import DatasetError
from jaxload.storage.urls import TIMEOUT_S, join

log = logging.getLogger("jaxload.storage")

# Seconds a presigned URL is valid, and the age at which it is signed again.
SIGNED_URL_S = 3600
RESIGN_AFTER_S = SIGNED_URL_S // 2


class HTTPStatusError(OSError):
    """A store answered a signed GET with an error status (classified by `.status` in
    `jaxload.storage.retry`: 404 missing, 401/403 denied, 408/429/5xx transient)."""

    def __init__(self, status: int, url: str, body: bytes):
        reason = body[:200].decode("utf-8", "replace").strip()
        super().__init__(f"HTTP {status} for {url.split('?')[0]}: {reason or '(no body)'}")
        self.status = status


class FsspecRanges:
    """Ranges through the fsspec filesystem itself."""

    kind = "fsspec"

    def __init__(self, fs: Any, root: str):
        self.fs, self.root = fs, root

    def get(self, relative: str, start: int | None = None, end: int | None = None) -> bytes:
        return self.fs.cat_file(join(self.root, relative), start=start, end=end)


class SignedRanges:
    """Ranges through presigned URLs and a urllib3 pool (thread-safe, `connections` kept
    open)."""

    kind = "signed"

    def __init__(self, fs: Any, root: str, connections: int, timeout_s: float = TIMEOUT_S):
        import urllib3

        self.fs, self.root = fs, root
        self.pool = urllib3.PoolManager(
            # the fetch threads plus the read threads that fetch a miss themselves
            maxsize=connections + 16,
            retries=False,  # jaxload's RetryPolicy retries, once, in one place
            timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
        )
        self._lock = threading.Lock()
        self._signed: dict[str, tuple[str, float]] = {}  # relative -> (url, signed at)

    def url(self, relative: str, fresh: bool = False) -> str:
        now = time.monotonic()
        with self._lock:
            found = self._signed.get(relative)
        if found is not None and not fresh and now - found[1] < RESIGN_AFTER_S:
            return found[0]
        signed = self.fs.sign(join(self.root, relative), expiration=SIGNED_URL_S)
        with self._lock:
            self._signed[relative] = (signed, now)
        return signed

    def get(self, relative: str, start: int | None = None, end: int | None = None) -> bytes:
        status, data, url = self._request(self.url(relative), start, end)
        if status == 403:  # expired or rotated credentials: sign again, once
            status, data, url = self._request(self.url(relative, fresh=True), start, end)
        if status not in (200, 206):
            raise HTTPStatusError(status, url, data)
        if start is not None and status == 200:  # a server that ignores Range
            return data[start:end]
        return data

    def _request(self, url: str, start: int | None, end: int | None) -> tuple[int, bytes, str]:
        import urllib3

        headers = {}
        if start is not None:
            last = "" if end is None else str(end - 1)
            headers["Range"] = f"bytes={start}-{last}"
        try:
            response = self.pool.request("GET", url, headers=headers)
        except urllib3.exceptions.HTTPError as e:  # dropped, refused, timed out
            raise ConnectionError(f"{url.split('?')[0]}: {e}") from e
        return response.status, response.data, url


def open_ranges(
    fs: Any,
    root: str,
    url: str,
    connections: int,
    signed: bool | None,
    timeout_s: float = TIMEOUT_S,
) -> Any:
    """`SignedRanges` when `signed` is not False and the store signs URLs that return
    what fsspec returns for `meta/info.json`; else `FsspecRanges`. `signed=True` makes a
    failed check an error instead of a fallback."""
    plain = FsspecRanges(fs, root)
    if signed is False or not callable(getattr(fs, "sign", None)):
        return plain
    try:
        fast = SignedRanges(fs, root, connections, timeout_s)
        probe = "meta/info.json"
        same = fast.get(probe, 0, 64) == plain.get(probe, 0, 64)
    except Exception as e:  # NotImplementedError, no credentials, refused, ...
        if signed:
            raise
        log.info("%s: presigned URLs unavailable (%s); reading through fsspec", url, e)
        return plain
    if not same:
        if signed:
            raise DatasetError(f"{url}: a presigned GET returned other bytes than fsspec")
        log.warning("%s: a presigned GET returned other bytes; reading through fsspec", url)
        return plain
    return fast
