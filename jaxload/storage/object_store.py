"""A dataset in object storage (s3://, gs://, hf://, https://) as a
`jaxload.format.storage.DatasetStorage`: its metadata files read by name where they live,
its records read by byte range through a `RemoteStore` (verified, cached, fetched ahead).

    storage = open_storage("s3://bucket/ds", storage_options={"anon": True})
    files = DatasetFiles(storage)            # the format reader, as for a local directory
    files.readers.read(0, [17, 18])          # verified payloads (RemoteRecords)
    files.readers.store.stats()              # requests, bytes, cache hit rate, ...
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxload.errors import DatasetError
from jaxload.format.layout import DatasetInfo
from jaxload.format.storage import DatasetStorage, LocalDirectory
from jaxload.storage.options import RemoteOptions
from jaxload.storage.remote import ReadContext, RemoteStore
from jaxload.storage.retry import MISSING, RemoteError, call_with_retries, no_such_bucket
from jaxload.storage.urls import filesystem, is_url, join, redact

# The largest metadata object read: a store that serves more (a damaged upload, or one
# that is not a dataset's) is refused before it fills memory.
MAX_META_BYTES = 1 << 30


class ObjectStore:
    """A dataset at a URL: metadata by name (retried, at most MAX_META_BYTES each),
    records through a `RemoteStore` made by `record_reader`. Picklable (the filesystem is
    opened again where it is used)."""

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        remote: RemoteOptions | Mapping[str, Any] | None = None,
    ):
        self.address = str(url).rstrip("/")  # requests go there; messages name `url`
        self.url = self.name = redact(self.address)
        self.storage_options = dict(storage_options or {})
        self.remote = RemoteOptions.of(remote)
        self._fs: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None}

    @property
    def local_path(self) -> None:
        return None  # its files are in object storage, not on this machine

    def where(self, relative: str) -> str:
        return join(self.url, relative)

    def read(self, relative: str) -> bytes | None:
        if self._fs is None:
            self._fs = filesystem(self.address, self.storage_options)
        fs, root = self._fs
        try:
            data = call_with_retries(
                lambda: fs.cat_file(join(root, relative), start=0, end=MAX_META_BYTES + 1),
                what=self.where(relative),
                policy=self.remote.retry,
            )
        except RemoteError as e:
            if e.kind == MISSING and not no_such_bucket(e):
                return None  # no such object: the caller says what it is missing for
            raise
        if len(data) > MAX_META_BYTES:
            raise DatasetError(
                f"{self.where(relative)}: larger than {MAX_META_BYTES >> 20} MiB, which no "
                "dataset's metadata file is; is the dataset in storage damaged?"
            )
        return data

    def write(self, relative: str, data: bytes) -> None:
        raise PermissionError(
            f"{self.where(relative)}: jaxload writes no metadata to object storage"
        )

    def record_reader(
        self, info: DatasetInfo, describe: Callable[[int, int], str] | None
    ) -> RemoteRecords:
        return RemoteRecords(
            RemoteStore(self.address, info, self.remote, self.storage_options, describe)
        )

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"


class RemoteRecords:
    """The `RecordReader` of a dataset at a URL: reads go to its `RemoteStore`."""

    def __init__(self, store: RemoteStore):
        self.store = store

    def read(
        self, shard: int, records: Sequence[int], context: ReadContext | None = None
    ) -> list[bytes]:
        return self.store.read(int(shard), [int(r) for r in records], context)

    def close(self) -> None:
        """Nothing to close per thread (the store's fetch threads outlive reads)."""


def remote_store_of(readers: Any) -> RemoteStore | None:
    """The RemoteStore behind a dataset's RecordReader (None: its shards are local)."""
    return readers.store if isinstance(readers, RemoteRecords) else None


def open_storage(
    path: str | os.PathLike,
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote: RemoteOptions | Mapping[str, Any] | None = None,
) -> DatasetStorage:
    """Where the dataset at `path` lives: a `LocalDirectory`, or an `ObjectStore` for a URL
    (s3://, gs://, hf://, https://; `storage_options` for its fsspec filesystem, `remote`
    its `RemoteOptions`)."""
    if is_url(path):
        return ObjectStore(str(path), storage_options, remote)
    return LocalDirectory(path)


__all__ = ["MAX_META_BYTES", "ObjectStore", "RemoteRecords", "open_storage", "remote_store_of"]
