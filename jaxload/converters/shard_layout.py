"""Where the bytes of one ArrayRecord shard go: records, framing, index and padding.

An ArrayRecord file is a Riegeli/records file (github.com/google/riegeli,
doc/riegeli_records_file_format.md): 64 KiB blocks, each starting with a 24-byte block
header; a 64-byte file signature; then chunks, each a 40-byte chunk header, its data
(`data_size` bytes: the records, zstd-compressed by ArrayRecord's default) and padding.
With `group_size:1` every record is its own chunk. After the records ArrayRecord writes a
footer chunk (every chunk's offset: the index a random read starts from) and a postscript
(where the footer is), both padded to 64 KiB block boundaries whatever the writer options
say (array_record's `WriteFooterAndPostscript`). So a shard carries 64-128 KiB of fixed
tail: why a shard of one tiny record is exactly 2 x 64 KiB (tests/converters/test_shard_layout.py).

`shard_layout(path)` walks the chunk headers (never the record contents) and returns
that split, which sums exactly to the file size.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct

import numpy as np

BLOCK = 65536
BLOCK_HEADER = 24
CHUNK_HEADER = 40
_HEADER = struct.Struct("<QQQQQ")  # header_hash, data_size, data_hash, type|num_records, decoded
_SIGNATURE, _PADDING, _SIMPLE = ord("s"), ord("p"), ord("r")


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    """One shard's bytes: `records.sum() + framing + footer + tail == size`."""

    size: int  # the file's bytes
    records: np.ndarray  # per record (chunk): its bytes on disk (header, data, Riegeli padding)
    decoded: np.ndarray  # per record: the stored record's bytes (payload and checksum)
    framing: int  # the file signature and the 24-byte block headers among the records
    footer: int  # the ArrayRecord footer chunk: each record's offset, what a read seeks by
    tail: int  # the postscript and the zeros aligning footer and postscript to 64 KiB blocks


def shard_layout(path: str | os.PathLike) -> ShardLayout:
    """Splits the ArrayRecord file at `path` (written with `group_size:1`) into its parts.

    Raises ValueError when the file is not laid out as described in the module docstring
    (another writer, or a format change in array_record).
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 2 * BLOCK or size % BLOCK:
            raise ValueError(f"{path}: {size} bytes is not a whole number of 64 KiB blocks")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _walk(data, size, str(path))


def _walk(data: mmap.mmap, size: int, where: str) -> ShardLayout:
    footer_at = _footer_offset(data, size, where)
    kind, *_ = _chunk_header(data, 0)
    if kind != _SIGNATURE:
        raise ValueError(f"{where}: no Riegeli file signature")
    position, _ = _chunk_end(0, 0, 0)
    framing = position  # the signature: a block header and an empty chunk
    records, decoded = [], []
    while position < footer_at:
        kind, data_size, num_records, decoded_size = _chunk_header(data, position)
        end, crossed = _chunk_end(position, data_size, num_records)
        framing += BLOCK_HEADER * crossed
        if kind == _SIMPLE and num_records == 1:
            records.append(end - position - BLOCK_HEADER * crossed)
            decoded.append(decoded_size)
        elif kind == _PADDING:  # not written with pad_to_block_boundary:false; framing if so
            framing += end - position - BLOCK_HEADER * crossed
        else:
            raise ValueError(
                f"{where}: chunk at byte {position} holds {num_records} records "
                f"(type {chr(kind)!r}); expected one record per chunk (group_size:1)"
            )
        position = end
    if position != footer_at:
        raise ValueError(f"{where}: chunks end at byte {position}, the footer is at {footer_at}")
    _, data_size, num_records, _ = _chunk_header(data, footer_at)
    footer_end, _ = _chunk_end(footer_at, data_size, num_records)
    return ShardLayout(
        size=size,
        records=np.asarray(records, dtype=np.int64),
        decoded=np.asarray(decoded, dtype=np.int64),
        framing=framing,
        footer=footer_end - footer_at,
        tail=size - footer_end,
    )


def _footer_offset(data: mmap.mmap, size: int, where: str) -> int:
    """The footer's position, from the postscript at the start of the last block: an
    uncompressed simple chunk whose records are `RiegeliPostscript` protos, field 1 of
    which (a varint) is the footer offset."""
    start = size - BLOCK
    kind, _, num_records, _ = _chunk_header(data, start)
    body = start + BLOCK_HEADER + CHUNK_HEADER
    if kind != _SIMPLE or num_records < 1 or data[body] != 0:  # 0: uncompressed
        raise ValueError(f"{where}: no ArrayRecord postscript in the last 64 KiB block")
    sizes_length, offset = _varint(data, body + 1)
    offset += sizes_length  # the records follow their sizes
    if data[offset] != 0x08:  # field 1, varint
        raise ValueError(f"{where}: unexpected ArrayRecord postscript")
    footer_at, _ = _varint(data, offset + 1)
    if not 0 < footer_at < start:
        raise ValueError(f"{where}: postscript points outside the file ({footer_at})")
    return footer_at


def _chunk_header(data: mmap.mmap, position: int) -> tuple[int, int, int, int]:
    """(chunk type, data_size, num_records, decoded_data_size) of the chunk at `position`."""
    raw = _logical(data, position, CHUNK_HEADER)
    _, data_size, _, type_and_count, decoded = _HEADER.unpack(raw)
    return type_and_count & 0xFF, data_size, type_and_count >> 8, decoded


def _logical(data: mmap.mmap, position: int, n: int) -> bytes:
    """`n` bytes of chunk content from `position`, skipping interleaved block headers."""
    out = bytearray()
    while len(out) < n:
        if position % BLOCK == 0:
            position += BLOCK_HEADER
        take = min(n - len(out), BLOCK - position % BLOCK)
        out += data[position : position + take]
        position += take
    return bytes(out)


def _chunk_end(begin: int, data_size: int, num_records: int) -> tuple[int, int]:
    """(end, block headers crossed) of a chunk: its header and data with a block header
    at every 64 KiB boundary, then Riegeli's padding, so that the chunk spans at least
    `num_records` bytes and does not end right after a block header."""
    end, crossed = _advance(begin, CHUNK_HEADER + data_size)
    if end - begin < num_records:
        end, more = _advance(end, num_records - (end - begin))
        crossed += more
    if 0 < end % BLOCK <= BLOCK_HEADER:
        end, more = _advance(end, BLOCK_HEADER + 1 - end % BLOCK)
        crossed += more
    return end, crossed


def _advance(position: int, n: int) -> tuple[int, int]:
    """Where `n` content bytes written from `position` end, and block headers crossed."""
    crossed = 0
    while n > 0:
        if position % BLOCK == 0:
            position += BLOCK_HEADER
            crossed += 1
        take = min(n, BLOCK - position % BLOCK)
        position += take
        n -= take
    return position, crossed


def _varint(data: mmap.mmap, position: int) -> tuple[int, int]:
    """A protobuf varint at `position`: (value, position after it)."""
    value, shift = 0, 0
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if byte < 0x80:
            return value, position
        shift += 7
