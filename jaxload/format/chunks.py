"""Records of a shard by byte range: where each record's chunk lies, and its decoding.

A shard is an ArrayRecord file, i.e. a Riegeli/records file (google/riegeli,
doc/riegeli_records_file_format.md). Written with `group_size:1` every record is its
own *simple chunk* (`chunk_type` 'r', one record, zstd): a 40-byte chunk header, then
`compression_type`, the compressed record sizes and the compressed value. Every 64 KiB
of the file a 24-byte *block header* interrupts whatever is there. So the bytes
`[offsets[i], offsets[i + 1])` of a shard hold record `i` completely, and decode without
ArrayRecord's reader (which takes file paths only):

    offsets = record_offsets(Path("data/shard-00000.array_record").read_bytes(), 3779)
    stored = decode_chunk(data[offsets[17]:offsets[18]], offsets[17])   # == ArrayRecord's

The converter writes `offsets` beside each shard (`layout.offsets_path`); remote readers
fetch exactly the chunks they need (`jaxload.storage.remote`). Nothing here checks
Riegeli's own hashes: the position-keyed xxh3 checksum of every record
(`layout.unseal_record`) verifies what was decoded, as for local reads.
"""

from __future__ import annotations

import threading

import numpy as np

from jaxload.errors import CorruptRecordError

BLOCK_SIZE = 1 << 16
BLOCK_HEADER_SIZE = 24
USABLE_BLOCK_SIZE = BLOCK_SIZE - BLOCK_HEADER_SIZE
CHUNK_HEADER_SIZE = 40
SIMPLE_CHUNK = ord("r")
SIGNATURE_CHUNK = ord("s")
# Offsets are stored little-endian uint64: the n chunk beginnings of a shard's n records,
# then the end of the last one.
OFFSET_DTYPE = np.dtype("<u8")
# A record read by byte range decodes to at most MAX_RATIO times its stored bytes, or
# MIN_DECODED_CAP (a tabular block of constant values compresses far; an mp4 fragment
# hardly at all).
MAX_RATIO = 1024
MIN_DECODED_CAP = 16 << 20


def add_with_overhead(pos: int, size: int) -> int:
    """The physical position `size` logical bytes after `pos` (block headers skipped)."""
    blocks = (size + (pos + USABLE_BLOCK_SIZE - 1) % BLOCK_SIZE) // USABLE_BLOCK_SIZE
    return pos + size + blocks * BLOCK_HEADER_SIZE


def _round_up_to_possible_chunk_boundary(pos: int) -> int:
    remaining = BLOCK_SIZE - 1 - (pos + BLOCK_SIZE - 1) % BLOCK_SIZE
    return pos + max(0, remaining - (USABLE_BLOCK_SIZE - 1))


def chunk_end(chunk_begin: int, data_size: int, num_records: int) -> int:
    """Where the chunk that begins at `chunk_begin` ends (the format's formula)."""
    return max(
        add_with_overhead(chunk_begin, CHUNK_HEADER_SIZE + data_size),
        _round_up_to_possible_chunk_boundary(chunk_begin + num_records),
    )


def strip_block_headers(data: bytes | memoryview, begin: int) -> bytes | memoryview:
    """The bytes of `data` (which starts at file position `begin`) without block headers
    (`data` itself when none lies inside it, as for most records)."""
    view = memoryview(data)
    if begin % BLOCK_SIZE and (begin + len(view) - 1) // BLOCK_SIZE == begin // BLOCK_SIZE:
        return view
    parts, pos, end = [], begin, begin + len(view)
    while pos < end:
        if pos % BLOCK_SIZE == 0:  # a block header starts here
            pos = min(end, pos + BLOCK_HEADER_SIZE)
            continue
        stop = min(end, (pos // BLOCK_SIZE + 1) * BLOCK_SIZE)
        parts.append(view[pos - begin : stop - begin])
        pos = stop
    return b"".join(parts)


def _header(logical: bytes, where: str) -> tuple[int, int, int, int]:
    """(data_size, chunk_type, num_records, decoded_data_size) of a chunk header."""
    if len(logical) < CHUNK_HEADER_SIZE:
        raise CorruptRecordError(f"{where}: chunk header cut short ({len(logical)} bytes)")
    data_size = int.from_bytes(logical[8:16], "little")
    chunk_type = logical[24]
    num_records = int.from_bytes(logical[25:32], "little")
    decoded = int.from_bytes(logical[32:40], "little")
    return data_size, chunk_type, num_records, decoded


def record_offsets(data: bytes | memoryview, num_records: int, where: str = "shard") -> np.ndarray:
    """The chunk boundaries of a shard's `num_records` records (n + 1 offsets), found by
    walking its chunk headers from the file signature on. `data`: the whole file (an mmap
    does). Chunks that hold no record (signature, metadata, padding) are skipped; the walk
    stops after the last record, before ArrayRecord's footer."""
    view = memoryview(data)
    offsets = np.empty(num_records + 1, OFFSET_DTYPE)
    pos, found = 0, 0
    while found < num_records:
        # The header may be interrupted by a block header: read it with some slack.
        raw = view[pos : add_with_overhead(pos, CHUNK_HEADER_SIZE)]
        data_size, chunk_type, n, _ = _header(strip_block_headers(raw, pos), f"{where}@{pos}")
        end = chunk_end(pos, data_size, n)
        if end > len(view) or end <= pos:
            raise CorruptRecordError(f"{where}: chunk at byte {pos} runs past the file ({end})")
        if n:
            if chunk_type != SIMPLE_CHUNK or n != 1:
                raise CorruptRecordError(
                    f"{where}: chunk at byte {pos} holds {n} records of type {chr(chunk_type)!r}; "
                    "byte-range reads need one record per simple chunk (group_size:1)"
                )
            offsets[found] = pos
            found += 1
        pos = end
    offsets[num_records] = pos
    return offsets


def decode_chunk(data: bytes | memoryview, begin: int, where: str = "record") -> bytes:
    """The one record stored in the chunk `data`, which starts at file position `begin`.

    Raises CorruptRecordError when the bytes are not such a chunk (a wrong range, damaged
    bytes); bytes that decode but are not the right record fail the caller's checksum."""
    logical = strip_block_headers(data, begin)
    data_size, chunk_type, n, decoded_size = _header(logical, where)
    if chunk_type != SIMPLE_CHUNK or n != 1 or CHUNK_HEADER_SIZE + data_size > len(logical):
        raise CorruptRecordError(
            f"{where}: bytes at {begin} are not a one-record chunk (type {chunk_type}, "
            f"{n} records, {data_size} data bytes in a range of {len(logical)})"
        )
    body = logical[CHUNK_HEADER_SIZE : CHUNK_HEADER_SIZE + data_size]
    most = max_decoded_size(data_size)
    if decoded_size > most:  # a chunk that would inflate memory before its checksum fails
        raise CorruptRecordError(
            f"{where}: chunk at byte {begin} declares {decoded_size} bytes from {data_size} "
            f"compressed, more than any record jaxload writes ({most}); the bytes are damaged "
            "or not a dataset's"
        )
    try:
        compression = body[0]
        sizes_size, pos = _varint(body, 1)
        values = body[pos + sizes_size :]
        if compression == 0:
            value = bytes(values)
        elif compression == ord("z"):
            expected, start = _varint(values, 0)
            value = _zstd().decompress(values[start:], max_output_size=min(expected, most))
        else:
            raise ValueError(f"compression {chr(compression)!r} is not supported (zstd or none)")
    except CorruptRecordError:
        raise
    except Exception as e:  # zstd errors, a varint past the end
        raise CorruptRecordError(f"{where}: chunk at byte {begin} does not decode ({e})") from e
    if len(value) != decoded_size:
        raise CorruptRecordError(
            f"{where}: chunk at byte {begin} decodes to {len(value)} bytes, header says "
            f"{decoded_size}"
        )
    return value


def max_decoded_size(data_size: int) -> int:
    """The most bytes a record of `data_size` stored bytes may decode to: far more than the
    records jaxload writes (tabular blocks, mp4 fragments) ever do, far less than a crafted
    chunk can declare in a few bytes (gigabytes, decoded before any checksum could fail)."""
    return max(MIN_DECODED_CAP, MAX_RATIO * data_size)


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("varint past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


_local = threading.local()


def _zstd():
    """This thread's zstd decompressor (python-zstandard's are not thread-safe: one shared
    by the fetch threads returned wrong bytes, which the record checksums caught)."""
    decompressor = getattr(_local, "zstd", None)
    if decompressor is None:
        import zstandard

        decompressor = _local.zstd = zstandard.ZstdDecompressor()
    return decompressor
