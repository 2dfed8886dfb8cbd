"""Records of a shard by byte range (jaxload.format.chunks): the chunk walk and decoding
agree with ArrayRecord's own reader on real files, across 64 KiB block headers, and damaged
or foreign bytes raise a CorruptRecordError naming where, never other data."""

from __future__ import annotations

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

from jaxload.errors import CorruptRecordError
from jaxload.format import chunks, layout

SIZES = [10, 30_000, 70_000, 5, 200_000, 1]  # records straddling 64 KiB blocks


def _write(path, records, options=layout.WRITER_OPTIONS):
    writer = ArrayRecordWriter(str(path), options)
    for record in records:
        writer.write(record)
    writer.close()
    return path.read_bytes()


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """A shard written as the converter writes them: incompressible records of many sizes
    (a compressible one too) and what ArrayRecord reads back."""
    rng = np.random.default_rng(0)
    records = [rng.integers(0, 256, n, np.uint8).tobytes() for n in SIZES]
    records.append(b"\x00" * 100_000)  # compresses 1000-fold
    data = _write(tmp_path_factory.mktemp("chunks") / "s.array_record", records)
    return data, records


def test_every_record_decodes_from_its_byte_range_as_array_record_reads_it(shard, tmp_path):
    data, records = shard
    offsets = chunks.record_offsets(data, len(records))
    assert offsets.dtype == chunks.OFFSET_DTYPE and len(offsets) == len(records) + 1
    assert np.all(np.diff(offsets.astype(np.int64)) > 0) and offsets[-1] <= len(data)
    path = tmp_path / "s.array_record"
    path.write_bytes(data)
    reader = ArrayRecordReader(str(path), layout.READER_OPTIONS)
    stored = reader.read(list(range(len(records))))
    reader.close()
    assert stored == records
    crossed = 0
    for i, record in enumerate(records):
        begin, end = int(offsets[i]), int(offsets[i + 1])
        crossed += (end - 1) // chunks.BLOCK_SIZE != begin // chunks.BLOCK_SIZE
        assert chunks.decode_chunk(data[begin:end], begin) == record, i
    assert crossed >= 2  # block headers were stripped on the way


def test_a_range_without_a_block_header_is_returned_as_is():
    data = bytes(range(100))
    assert isinstance(chunks.strip_block_headers(data, 1000), memoryview)
    # a range over a block boundary loses the 24 header bytes after it
    begin = chunks.BLOCK_SIZE - 10
    stripped = chunks.strip_block_headers(bytes(100), begin)
    assert len(stripped) == 100 - chunks.BLOCK_HEADER_SIZE


def test_a_shard_cut_short_is_named_at_the_chunk(shard):
    data, records = shard
    with pytest.raises(CorruptRecordError, match=r"^s1: chunk at byte \d+ runs past the file"):
        chunks.record_offsets(data[: len(data) // 2], len(records), "s1")


def test_chunks_of_several_records_are_refused_for_byte_range_reads(tmp_path):
    options = layout.WRITER_OPTIONS.replace("group_size:1", "group_size:4")
    data = _write(tmp_path / "g.array_record", [b"a" * 10, b"b" * 10, b"c" * 10])
    assert len(chunks.record_offsets(data, 3)) == 4
    grouped = _write(tmp_path / "g4.array_record", [b"a" * 10, b"b" * 10, b"c" * 10], options)
    with pytest.raises(CorruptRecordError, match=r"holds 3 records .* need one record per"):
        chunks.record_offsets(grouped, 3, "g4")


def test_damaged_or_misplaced_bytes_never_decode_to_a_record(shard):
    data, records = shard
    offsets = chunks.record_offsets(data, len(records))
    begin, end = int(offsets[1]), int(offsets[2])
    with pytest.raises(CorruptRecordError, match=r"^r: chunk header cut short \(12 bytes\)"):
        chunks.decode_chunk(data[begin : begin + 12], begin, "r")
    with pytest.raises(CorruptRecordError, match="are not a one-record chunk"):
        chunks.decode_chunk(data[begin : end - 100], begin, "r")  # the value cut short
    with pytest.raises(CorruptRecordError, match="not a one-record chunk"):
        chunks.decode_chunk(data[0:end], 0, "r")  # the signature chunk, not a record
    body = bytearray(data[begin:end])
    body[chunks.CHUNK_HEADER_SIZE + 20 : chunks.CHUNK_HEADER_SIZE + 60] = bytes(40)
    with pytest.raises(CorruptRecordError, match=r"^r: chunk at byte \d+ does not decode"):
        chunks.decode_chunk(bytes(body), begin, "r")


def test_a_chunk_declaring_more_than_any_record_is_refused_before_decoding(shard):
    data, records = shard
    offsets = chunks.record_offsets(data, len(records))
    begin, end = int(offsets[0]), int(offsets[1])  # a 10-byte record
    huge = bytearray(data[begin:end])
    huge[32:40] = (1 << 40).to_bytes(8, "little")  # decoded_data_size
    with pytest.raises(CorruptRecordError, match=r"declares 1099511627776 bytes .* more than"):
        chunks.decode_chunk(bytes(huge), begin, "r")
    assert chunks.max_decoded_size(10) == chunks.MIN_DECODED_CAP
    assert chunks.max_decoded_size(1 << 20) == chunks.MAX_RATIO << 20


def test_chunk_end_adds_the_block_headers_a_chunk_spans():
    assert chunks.add_with_overhead(100, 50) == 150
    past = chunks.add_with_overhead(chunks.BLOCK_SIZE - 10, 50)
    assert past == chunks.BLOCK_SIZE - 10 + 50 + chunks.BLOCK_HEADER_SIZE
    assert chunks.chunk_end(100, 10, 1) == 100 + chunks.CHUNK_HEADER_SIZE + 10
