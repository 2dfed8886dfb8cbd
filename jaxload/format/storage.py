"""Where a converted dataset's files are: the interfaces the format reader reads through.

`DatasetStorage` gives a dataset's metadata files by name and a `RecordReader` of its
shards. A local directory (`LocalDirectory`, here) and an object store
(`jaxload.storage.object_store.ObjectStore`: s3://, gs://, hf://, https://) both
implement it, so the reader (`jaxload.format.reader.DatasetFiles`), the statistics and the
doctor read a dataset where it lives, whatever it lives on::

    storage = LocalDirectory("out/demo")            # or jaxload.storage.open_storage(url)
    raw = storage.read("meta/info.json")            # bytes, None when there is no such file
    records = storage.record_reader(info, describe)  # verified payloads by (shard, record)
    records.read(0, [17, 18])

Messages name files with `storage.where(relative)`: the path, or the URL.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from jaxload.errors import DatasetError
from jaxload.format.layout import write_bytes_atomic


@runtime_checkable
class RecordReader(Protocol):
    """Verified record payloads of a dataset's shards, safe to share between threads and
    picklable (each process opens its own files or connections)."""

    def read(self, shard: int, records: Sequence[int], context: Any = None) -> list[bytes]:
        """The verified payloads of `records` of shard `shard`, in order. `context`: what
        the reader of a batch knows of it (`jaxload.storage.remote.ReadContext`), or None."""
        ...

    def close(self) -> None:
        """Closes what this thread opened (a later read opens it again)."""
        ...


@runtime_checkable
class DatasetStorage(Protocol):
    """A converted dataset's files: its metadata by name, its records through a reader."""

    name: str  # the directory or the URL, as messages name the dataset

    @property
    def local_path(self) -> str | None:
        """The dataset's directory on this machine's file system; None where its files are
        elsewhere (an object store). Where it is set, files can be stat'ed and every record
        read cheaply."""
        ...

    def where(self, relative: str) -> str:
        """The file at `relative` (a layout path such as meta/info.json), as messages name it."""
        ...

    def read(self, relative: str) -> bytes | None:
        """The bytes of the file at `relative`; None when there is none. A file that exists
        but cannot be read raises a DatasetError (or RemoteError) naming it."""
        ...

    def write(self, relative: str, data: bytes) -> None:
        """Writes the file at `relative` atomically (readers see the old or the new one);
        OSError where the storage cannot be written."""
        ...

    def record_reader(self, info: Any, describe: Callable[[int, int], str] | None) -> RecordReader:
        """The reader of the shards of the dataset described by `info` (its DatasetInfo);
        `describe(shard, record)` says what a record holds, for messages."""
        ...


class LocalDirectory:
    """A dataset in a local directory (ArrayRecord shards read through their index)."""

    def __init__(self, root: str | os.PathLike):
        self.root = os.fspath(root)
        self.name = self.root

    @property
    def local_path(self) -> str:
        return self.root

    def where(self, relative: str) -> str:
        return os.path.join(self.root, relative)

    def read(self, relative: str) -> bytes | None:
        path = Path(self.where(relative))
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise DatasetError(f"{path}: unreadable ({e})") from e

    def write(self, relative: str, data: bytes) -> None:
        write_bytes_atomic(self.where(relative), data)

    def record_reader(self, info: Any, describe: Callable[[int, int], str] | None) -> RecordReader:
        from jaxload.format.shards import ShardReaders

        return ShardReaders(self.root, info, describe)

    def __repr__(self) -> str:
        return f"LocalDirectory({self.root!r})"


def read_parquet(
    storage: DatasetStorage, relative: str, columns: Sequence[str] | None = None
) -> Any:
    """The metadata parquet file at `relative` as a pyarrow Table (only `columns`, when
    given); a DatasetError naming it when it is missing, unreadable or lacks a column."""
    return open_parquet(storage, relative, columns).read(columns)


class ParquetColumns:
    """A metadata parquet file opened once, its columns read on demand (one thread: faster
    here than pyarrow's pool on a busy machine); unreadable data raises a DatasetError."""

    def __init__(self, file: Any, path: str):
        self.file, self.path = file, path

    def read(self, columns: Sequence[str] | None = None) -> Any:
        try:
            return self.file.read(list(columns) if columns is not None else None, use_threads=False)
        except Exception as e:  # pyarrow raises several types for corrupt files
            raise DatasetError(f"{self.path}: unreadable parquet ({e})") from e


def open_parquet(
    storage: DatasetStorage, relative: str, columns: Sequence[str] | None = None
) -> ParquetColumns:
    """The metadata parquet file at `relative`, checked to have `columns`; a DatasetError
    naming it when it is missing, unreadable or lacks one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = storage.where(relative)
    data = storage.read(relative)
    if data is None:
        raise DatasetError(f"{path}: missing; is {storage.name} a jaxload dataset?")
    try:
        file = pq.ParquetFile(pa.py_buffer(data))
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DatasetError(f"{path}: unreadable parquet ({e})") from e
    missing = [c for c in columns or () if c not in file.schema_arrow.names]
    if missing:
        raise DatasetError(f"{path}: columns {missing} missing")
    return ParquetColumns(file, path)


def as_storage(where: str | os.PathLike | DatasetStorage) -> DatasetStorage:
    """`where` itself when it is a DatasetStorage, else the local directory it names."""
    if isinstance(where, str | os.PathLike):
        return LocalDirectory(where)
    if isinstance(where, DatasetStorage):
        return where
    raise TypeError(f"expected a dataset directory or a DatasetStorage, got {where!r}")
