"""Writes episodes into ArrayRecord shards, in order, and hashes what it writes."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from array_record.python.array_record_module import ArrayRecordWriter

from jaxload import format as fmt
from jaxload.format.chunks import record_offsets

DEFAULT_SHARD_BYTES = 256 * 2**20


class ShardWriter:
    """Appends whole episodes to shard files, starting a new shard past `shard_bytes`.

    An episode never spans two shards, so one sample always reads from one file. The
    output depends only on the order and content of the episodes appended. With a
    `record_seed` (the dataset's records key), every record is stored sealed with its
    position-keyed checksum (`jaxload.format.seal_record`); a `digest` (sha256), when
    given, takes the stored bytes.

    Each shard is written under a temp name and renamed when it is complete; then
    `on_close(shard, records, bytes)` runs (the converter checkpoints there). To resume
    after shard k-1, pass `first_shard=k`.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        *,
        first_shard: int = 0,
        digest=None,
        on_close: Callable[[int, int, int], None] | None = None,
        record_seed: int | None = None,
    ):
        self._root = root
        self._seed = record_seed  # None: records are written as given (no checksums)
        self._shard_bytes = shard_bytes
        self._on_close = on_close
        self._writer: ArrayRecordWriter | None = None
        self._shard = first_shard - 1
        self._records = 0
        self._bytes = 0
        self.digest = digest

    def append_episode(self, blocks: Sequence[Sequence[bytes]]) -> tuple[int, list[int]]:
        """Writes the episode's record blocks; returns its shard and each block's first record."""
        size = sum(len(r) for block in blocks for r in block)
        if self._writer is None or (self._bytes and self._bytes + size > self._shard_bytes):
            self._next_shard()
        starts = []
        for block in blocks:
            starts.append(self._records)
            for record in block:
                if self._seed is not None:
                    record = fmt.seal_record(record, self._seed, self._shard, self._records)
                self._writer.write(record)
                if self.digest is not None:
                    fmt.hash_record(self.digest, record)
                self._records += 1
        self._bytes += size
        return self._shard, starts

    @property
    def num_shards(self) -> int:
        return self._shard + 1

    def _path(self, shard: int) -> str:
        return os.path.join(self._root, fmt.shard_path(shard))

    def _next_shard(self) -> None:
        self.close()
        self._shard += 1
        path = self._path(self._shard)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._writer = ArrayRecordWriter(path + ".tmp", fmt.WRITER_OPTIONS)
        self._records = 0
        self._bytes = 0

    def close(self) -> None:
        """Finishes the open shard: complete under its name, then `on_close`."""
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        path = self._path(self._shard)
        _fsync(path + ".tmp")
        os.replace(path + ".tmp", path)
        if self._on_close is not None:
            self._on_close(self._shard, self._records, os.path.getsize(path))

    def abort(self) -> None:
        """Drops the open shard (after an error): nothing half-written keeps a shard's name."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            path = self._path(self._shard) + ".tmp"
            if os.path.exists(path):
                os.unlink(path)


def write_offsets(root: str | os.PathLike, shard_records: Sequence[int]) -> tuple[str, ...]:
    """Writes each shard's record offset index (`fmt.offsets_path`, format 4: the byte range
    of every record, for remote reads) beside it; returns their xxh3_64 digests (hex), which
    info.json records. Derived from the shard bytes only, so conversions stay reproducible."""
    from xxhash import xxh3_64_hexdigest

    digests = []
    for shard, count in enumerate(shard_records):
        path = Path(root) / fmt.shard_path(shard)
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                offsets = record_offsets(data, int(count), str(path)).tobytes()
            finally:
                # A CorruptRecordError's traceback holds a view of the map, and closing it
                # then raises BufferError in place of the error naming the shard: the map
                # is unmapped when the error is dropped instead.
                with contextlib.suppress(BufferError):
                    data.close()
        target = Path(root) / fmt.offsets_path(shard)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(offsets)
        os.replace(tmp, target)
        digests.append(xxh3_64_hexdigest(offsets))
    return tuple(digests)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
