"""converters/shard_layout.py: a real ArrayRecord shard (the converter's writer options)
split into records, framing, footer and tail, summing exactly to the file's size; a file
not laid out that way is a ValueError naming it. (On converted datasets:
tests/converters/test_sizes.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter

from jaxload import format as fmt
from jaxload.converters.shard_layout import BLOCK, BLOCK_HEADER, shard_layout


def _shard(path, records):
    writer = ArrayRecordWriter(str(path), fmt.WRITER_OPTIONS)
    for record in records:
        writer.write(record)
    writer.close()
    return path


def test_a_shard_splits_exactly_into_its_parts(tmp_path):
    rng = np.random.default_rng(0)
    # incompressible records, one larger than a block: it crosses block headers
    records = [rng.bytes(n) for n in (10, 1000, 3 * BLOCK, 5)]
    path = _shard(tmp_path / "s.array_record", records)
    layout = shard_layout(path)
    assert layout.size == path.stat().st_size
    assert layout.records.sum() + layout.framing + layout.footer + layout.tail == layout.size
    assert len(layout.records) == len(records) == len(layout.decoded)
    assert all(d >= len(r) for d, r in zip(layout.decoded, records))
    assert layout.records[2] > 3 * BLOCK and layout.framing >= 3 * BLOCK_HEADER
    assert BLOCK <= layout.tail + layout.footer <= 2 * BLOCK + layout.footer


def test_a_tiny_shard_is_mostly_fixed_tail(tmp_path):
    layout = shard_layout(_shard(tmp_path / "s.array_record", [b"x"]))
    assert layout.size == 2 * BLOCK and layout.decoded.tolist() == [1]
    assert layout.tail + layout.footer > BLOCK  # footer and postscript padded to blocks


def test_other_files_are_refused_naming_them(tmp_path):
    odd = tmp_path / "odd.array_record"
    odd.write_bytes(b"\0" * (BLOCK + 7))
    with pytest.raises(
        ValueError, match=r"odd\.array_record: 65543 bytes is not a whole number of 64 KiB blocks"
    ):
        shard_layout(odd)
    zeros = tmp_path / "zeros.array_record"
    zeros.write_bytes(b"\0" * (3 * BLOCK))
    with pytest.raises(ValueError, match=r"zeros\.array_record: "):
        shard_layout(zeros)
