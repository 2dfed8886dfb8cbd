"""converters/writer.py: whole episodes appended to ArrayRecord shards, a new shard past
the size limit (an episode never split), each shard complete under its name only when
closed, records sealed with their position's checksum, and the offset index beside each
shard giving every record's byte range."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordReader

from jaxload import format as fmt
from jaxload.converters.writer import ShardWriter, write_offsets
from jaxload.errors import CorruptRecordError


def _read(root, shard):
    reader = ArrayRecordReader(str(root / fmt.shard_path(shard)), "readahead_buffer_size:0")
    try:
        return [reader.read() for _ in range(reader.num_records())]
    finally:
        reader.close()


def test_episodes_fill_shards_in_order_and_are_never_split(tmp_path):
    closed = []
    writer = ShardWriter(tmp_path, shard_bytes=100, on_close=lambda *a: closed.append(a))
    episode = [[b"a" * 30, b"b" * 30], [b"c" * 30]]  # 90 bytes in two blocks
    assert writer.append_episode(episode) == (0, [0, 2])
    assert not (tmp_path / fmt.shard_path(0)).exists()  # still being written
    assert writer.append_episode([[b"d" * 20]]) == (1, [0])  # 90 + 20 > 100: a new shard
    assert writer.append_episode([[b"e" * 200]]) == (2, [0])  # alone, however large
    writer.close()
    assert writer.num_shards == 3 and [c[:2] for c in closed] == [(0, 3), (1, 1), (2, 1)]
    assert _read(tmp_path, 0) == [b"a" * 30, b"b" * 30, b"c" * 30]
    assert closed[0][2] == (tmp_path / fmt.shard_path(0)).stat().st_size
    assert not list(tmp_path.rglob("*.tmp"))


def test_records_are_sealed_by_position_and_hashed_as_stored(tmp_path):
    digest = hashlib.sha256()
    writer = ShardWriter(tmp_path, first_shard=4, digest=digest, record_seed=7)
    assert writer.append_episode([[b"x", b"y"]]) == (4, [0])
    writer.close()
    stored = _read(tmp_path, 4)
    assert stored == [fmt.seal_record(b"x", 7, 4, 0), fmt.seal_record(b"y", 7, 4, 1)]
    assert fmt.unseal_record(stored[1], 7, 4, 1) == b"y"
    assert fmt.unseal_record(stored[1], 7, 4, 0) is None  # the checksum is position-keyed
    expected = hashlib.sha256()
    for record in stored:
        fmt.hash_record(expected, record)
    assert digest.digest() == expected.digest()


def test_abort_leaves_no_half_written_shard(tmp_path):
    writer = ShardWriter(tmp_path)
    writer.append_episode([[b"x"]])
    writer.abort()
    assert not list((tmp_path / "data").iterdir())
    writer.close()  # nothing open: nothing happens


def test_offsets_give_each_records_byte_range(tmp_path):
    rng = np.random.default_rng(1)
    records = [rng.bytes(n) for n in (5, 70_000, 300)]
    writer = ShardWriter(tmp_path)
    writer.append_episode([records])
    writer.close()
    digests = write_offsets(tmp_path, [3])
    offsets = np.fromfile(tmp_path / fmt.offsets_path(0), "<u8")
    assert len(offsets) == 4 and np.all(np.diff(offsets) > 0)
    assert offsets[-1] <= (tmp_path / fmt.shard_path(0)).stat().st_size
    assert len(digests) == 1 and len(digests[0]) == 16
    assert write_offsets(tmp_path, [3]) == digests  # derived from the shard bytes only
    # more records than the shard holds: the error names the shard (it was a BufferError,
    # "cannot close exported pointers exist", from closing the map under the error)
    with pytest.raises(CorruptRecordError, match=r"shard-00000\.array_record"):
        write_offsets(tmp_path, [4])
