"""Writes episodes into ArrayRecord shards, in order, and hashes what it writes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

from array_record.python.array_record_module import ArrayRecordWriter

from jaxload import format as fmt

DEFAULT_SHARD_BYTES = 256 * 2**20


class ShardWriter:
    """Appends whole episodes to shard files, starting a new shard past `shard_bytes`.

    An episode never spans two shards, so one sample always reads from one file. The
    output depends only on the order and content of the episodes appended.
    """

    def __init__(self, root: str | os.PathLike, shard_bytes: int = DEFAULT_SHARD_BYTES):
        self._root = root
        self._shard_bytes = shard_bytes
        self._writer: ArrayRecordWriter | None = None
        self._shard = -1
        self._records = 0
        self._bytes = 0
        self.digest = hashlib.sha256()

    def append_episode(self, blocks: Sequence[Sequence[bytes]]) -> tuple[int, list[int]]:
        """Writes the episode's record blocks; returns its shard and each block's first record."""
        size = sum(len(r) for block in blocks for r in block)
        if self._writer is None or (self._bytes and self._bytes + size > self._shard_bytes):
            self._next_shard()
        starts = []
        for block in blocks:
            starts.append(self._records)
            for record in block:
                self._writer.write(record)
                fmt.hash_record(self.digest, record)
            self._records += len(block)
        self._bytes += size
        return self._shard, starts

    @property
    def num_shards(self) -> int:
        return self._shard + 1

    def _next_shard(self) -> None:
        self.close()
        self._shard += 1
        path = os.path.join(self._root, fmt.shard_path(self._shard))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._writer = ArrayRecordWriter(path, fmt.WRITER_OPTIONS)
        self._records = 0
        self._bytes = 0

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
