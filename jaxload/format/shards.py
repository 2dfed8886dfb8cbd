"""Reading a local dataset's shards: ArrayRecord readers per thread, every record verified.

    readers = ShardReaders("out/demo", info, describe=episodes.locate)
    payloads = readers.read(0, [17, 18])              # verified, in one batched call
    records, slots = read_requests(readers, requests)  # many (shard, record) arrays at once

`ShardReaders` is the local `jaxload.format.storage.RecordReader`; the remote one reads
byte ranges (`jaxload.storage.object_store`). `read_requests` works over either.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxload.errors import CorruptRecordError, DatasetChangedError, DatasetError
from jaxload.format import layout, open_shards
from jaxload.format.layout import DatasetInfo

log = logging.getLogger("jaxload.format.reader")


def open_shard(path: str | os.PathLike) -> Any:
    """An ArrayRecordReader over one shard (or a converter part file), with jaxload's
    explicit reader options; a DatasetError naming the file when it is missing or corrupt,
    an OpenFilesLimitError when the process has no descriptor left."""
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: shard file missing")
    reader = _array_record_reader(path)
    if not reader.ok():
        # A failed open() leaves a reader that is not ok and holds 0 records, no error
        # (array_record 0.8.6), as a bad file does: ask the OS why, so that EMFILE is not
        # called a bad file. If the OS opens it, a descriptor may have been freed since
        # (another read thread, out of descriptors too, closing the idle readers): try
        # once more before calling the file corrupt.
        _raise_if_unopenable(path)
        reader = _array_record_reader(path)
        if not reader.ok():
            _raise_if_unopenable(path)
            raise DatasetError(f"{path}: corrupt shard (ArrayRecord cannot read it)")
    return reader


def _array_record_reader(path: str | os.PathLike) -> Any:
    from array_record.python.array_record_module import ArrayRecordReader

    try:
        return ArrayRecordReader(str(path), layout.READER_OPTIONS)
    except Exception as e:  # array_record raises RuntimeError/ValueError on corruption
        raise DatasetError(f"{path}: corrupt shard ({e})") from e


def _raise_if_unopenable(path: str | os.PathLike) -> None:
    """The OS's reason `path` cannot be opened now, if it has one, as jaxload's error."""
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as e:
        if open_shards.is_out_of_descriptors(e):
            raise open_shards.out_of_descriptors(str(path), e) from e
        raise DatasetError(f"{path}: cannot open shard ({e})") from e


class ShardReaders:
    """Readers of a dataset's shards, from the process's bounded pool
    (`jaxload.format.open_shards`: each read checks one out, so no two threads use a
    reader at once, and at most `capacity` are open whatever the shard count), reopened
    after pickling (each process opens its own).

    They serve exactly the dataset version that was opened (`info`): a shard is checked
    when a thread first opens it (its record count, and that meta/info.json still holds
    the opened fingerprint), and every record read is checked against its position-keyed
    checksum (format version 3). A mismatch raises `DatasetChangedError` when the dataset
    on disk is another version now, else `CorruptRecordError`; both name the shard and the
    record, and `describe(shard, record)` (e.g. `Episodes.locate`) says what it holds.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        info: DatasetInfo,
        describe: Callable[[int, int], str] | None = None,
    ):
        self.root = str(root)
        self.info = info
        self.describe = describe
        self._token = next(_tokens)
        self._verified: tuple[int, ...] | None = None  # meta/info.json's stat, checked
        # Its readers leave the pool with it (a dataset dropped, a pipeline rebuilt).
        weakref.finalize(self, open_shards.READERS.drop, _owned_by(self._token))
        if not info.checked:
            _warn_unchecked(self.root, info.format_version)

    def path(self, shard: int) -> str:
        return os.path.join(self.root, layout.shard_path(shard))

    def _open(self, shard: int) -> Any:
        self._check_version(changed_only=True)
        reader = open_shard(self.path(shard))
        try:  # checked before it is kept: a reader kept unchecked served a swapped shard
            self._check_record_count(shard, reader)
        except BaseException:
            with contextlib.suppress(Exception):
                reader.close()
            raise
        return reader

    def read(self, shard: int, records: Sequence[int], context: Any = None) -> list[bytes]:
        """Records of one shard (their payloads, verified), in one batched call."""
        records = [int(r) for r in records]
        key = (self._token, shard)
        pool = open_shards.READERS
        reader = pool.checkout(key, lambda: self._open(shard))
        try:
            if len(records) > 1 and records == list(range(records[0], records[0] + len(records))):
                # Consecutive: ArrayRecord's range read, whose cost does not grow with the
                # shard's record count as a read of a list of indices does (0.4 ms per call
                # at 100k records, 2.3 ms at 400k; benchmarks/RESULTS.md, "Scale").
                stored = reader.read(records[0], records[-1] + 1)
            else:
                stored = reader.read(records)
        except Exception as e:  # array_record: RuntimeError on a bad chunk or an index past the end
            self._check_version()
            raise DatasetError(f"{self.path(shard)}: cannot read records ({e})") from e
        finally:
            pool.checkin(key, reader)
        if not self.info.checked:
            return stored
        seed = self.info.records_key
        payloads = [layout.unseal_record(d, seed, shard, r) for d, r in zip(stored, records)]
        if any(p is None for p in payloads):
            bad = records[next(i for i, p in enumerate(payloads) if p is None)]
            self._check_version()
            where = f" ({self.describe(shard, bad)})" if self.describe else ""
            raise CorruptRecordError(
                f"{self.path(shard)}: record {bad}{where} does not match its checksum: the "
                f"file changed after conversion (dataset {self.root}); reconvert or restore it"
            )
        return payloads

    def _check_version(self, changed_only: bool = False) -> None:
        """Raises DatasetChangedError when meta/info.json is no longer the opened one.
        `changed_only`: not when its stat (inode, size, mtime) is the one last checked
        (a shard opened again after the pool closed it: parsing DROID's info.json each
        time would cost ~1 ms; metadata is replaced atomically, so a new version is a new
        inode)."""
        path = Path(self.root) / layout.INFO_PATH
        try:
            stat = path.stat()
            seen = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if changed_only and seen == self._verified:
                return
            now = layout.parse_info(path.read_bytes(), str(path), self.root).fingerprint
        except (OSError, DatasetError) as e:
            if open_shards.is_out_of_descriptors(e):  # not a sign of another version
                raise open_shards.out_of_descriptors(str(path), e) from e
            raise DatasetChangedError(
                f"{self.root}: the dataset changed on disk after it was opened ({e})"
            ) from e
        if now != self.info.fingerprint:
            raise DatasetChangedError(
                f"{self.root}: the dataset on disk is another version than the one opened "
                f"(fingerprint {now[:12]}..., opened {self.info.fingerprint[:12]}...); "
                "reopen it (and start a new run: a checkpoint of this one cannot resume there)"
            )
        self._verified = seen

    def _check_record_count(self, shard: int, reader: Any) -> None:
        if not self.info.shard_records:
            return
        expected, actual = self.info.shard_records[shard], reader.num_records()
        if actual != expected:
            raise DatasetError(
                f"{self.path(shard)}: holds {actual} records but {layout.INFO_PATH} says "
                f"{expected}: the shard is truncated or from another conversion"
            )

    def close(self) -> None:
        """Closes this dataset's idle readers (those other threads are reading with stay
        open until they come back). A reader of a corrupt file can raise on close; that
        must not replace the DatasetError that named the file."""
        open_shards.READERS.drop(_owned_by(self._token))

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "info": self.info, "describe": self.describe}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"], state["info"], state["describe"])


_tokens = itertools.count()


def _owned_by(token: int) -> Callable[[Any], bool]:
    return lambda key: key[0] == token


_warned: set[str] = set()


def _warn_unchecked(root: str, version: int) -> None:
    """Once per dataset and process: its records carry no checksums."""
    if root not in _warned:
        _warned.add(root)
        log.warning(
            "%s: format version %d has no per-record checksums (reads are not verified); "
            "`jaxload doctor %s` verifies its fingerprint, reconverting adds the checks",
            root,
            version,
            root,
        )


def read_requests(
    reader: Any, requests: Mapping[Any, tuple[np.ndarray, np.ndarray]], context: Any = None
) -> tuple[list[bytes], dict[Any, np.ndarray]]:
    """Reads every requested (shard, record) once, with one `reader.read` per shard.

    `requests` maps a key to (shard, record) arrays (broadcast together). Returns the
    unique records and, per key, an array of the request's shape holding each (shard,
    record)'s position in that list. `context` goes to the reader (a remote read's batch).
    """
    unique, inverse, shapes = unique_pairs(requests)
    records: list[bytes] = [b""] * len(unique)
    for shard in np.unique(unique[:, 0]):
        rows = np.flatnonzero(unique[:, 0] == shard)
        payloads = reader.read(int(shard), unique[rows, 1], context)
        for row, data in zip(rows, payloads, strict=True):
            records[row] = data
    slots, start = {}, 0
    for key, shape in shapes.items():
        size = int(np.prod(shape))
        slots[key] = inverse[start : start + size].reshape(shape)
        start += size
    return records, slots


def unique_pairs(
    requests: Mapping[Any, tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, dict[Any, tuple[int, ...]]]:
    """The (shard, record) pairs `requests` name (a key -> (shard, record) arrays,
    broadcast together), sorted and unique, shape (n, 2); each requested pair's row in them
    (flat, the requests in order); and each request's shape."""
    shapes, packed = {}, []
    for key, (shard, record) in requests.items():
        shard, record = np.broadcast_arrays(
            np.asarray(shard, np.int64), np.asarray(record, np.int64)
        )
        shapes[key] = record.shape
        # One int64 per pair (records of a shard < 2**40): a 1-D unique, several times
        # faster than np.unique(axis=0), in the same order.
        packed.append((shard << 40 | record).reshape(-1))
    if not packed:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64), shapes
    unique, inverse = np.unique(np.concatenate(packed), return_inverse=True)
    return np.stack([unique >> 40, unique & ((1 << 40) - 1)], -1), inverse.reshape(-1), shapes
