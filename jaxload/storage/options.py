"""How a remote dataset is read: `RemoteOptions` (none of it changes what is read).

jaxload.make_loader("s3://bucket/ds", ..., remote=RemoteOptions(cache_bytes=2 << 30))
jaxload.make_loader("s3://bucket/ds", ..., remote={"cache_bytes": 2 << 30})   # the same
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from jaxload.storage.retry import RetryPolicy
from jaxload.storage.urls import TIMEOUT_S


@dataclasses.dataclass(frozen=True)
class RemoteOptions:
    """How a remote dataset is read (none of it changes what is read).

    Attributes:
        cache_bytes: budget of the verified-record cache, per process. Default 512 MiB.
        cache_dir: keep the cached records in files under this directory (a budget larger
            than memory, on a local disk) instead of in memory; each process uses its own
            subdirectory, removed when the process ends.
        concurrency: range requests in flight at once, per process.
        lookahead: batches planned ahead of the one being read (the window of
            `jaxload.storage.prefetch`'s sweep); None: each record fetched at least a few
            measured request latencies (at the measured batch interval) before its batch,
            and the sweep's period as long as the cache holds (`jaxload.storage.sweep`).
        coalesce_bytes: ranges of a shard closer than this are fetched as one request;
            None: measured latency × measured bandwidth (64 KiB .. 8 MiB).
        max_request_bytes: the largest merged request.
        signed_urls: fetch ranges through presigned URLs and a plain HTTP pool (a quarter
            of s3fs's CPU per request; `jaxload.storage.ranges`): None, where the store
            signs URLs that read back right; True, always (an error if it cannot); False,
            never (every request through fsspec).
        timeout_s: seconds a request waits to connect, or for its next bytes, before it
            fails as transient and is retried: a stalled store fails a read after about
            `retry.attempts` × this, with the URL, instead of hanging.
        retry: the retry policy for transient transport errors (the converter's).
        log_every_s: seconds between progress log lines (0: none).
    """

    cache_bytes: int = 512 << 20
    cache_dir: str | None = None
    concurrency: int = 16
    lookahead: int | None = None
    coalesce_bytes: int | None = None
    max_request_bytes: int = 16 << 20
    signed_urls: bool | None = None
    timeout_s: float = TIMEOUT_S
    retry: RetryPolicy = dataclasses.field(
        default_factory=lambda: RetryPolicy(attempts=5, base_delay=0.2, max_delay=5.0)
    )
    log_every_s: float = 60.0

    @classmethod
    def of(cls, value: RemoteOptions | Mapping[str, Any] | None) -> RemoteOptions:
        """`value` as RemoteOptions: itself, the defaults for None, or built from a dict
        of its fields (an unknown name is an error naming the fields)."""
        if value is None or isinstance(value, cls):
            return value or cls()
        if not isinstance(value, Mapping):
            raise TypeError(f"remote= takes RemoteOptions or a dict of its fields, not {value!r}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - fields)
        if unknown:
            raise TypeError(
                f"remote=: unknown RemoteOptions field(s) {', '.join(unknown)}; "
                f"the fields are {', '.join(sorted(fields))}"
            )
        return cls(**value)
