"""converters/units.py: a unit's episodes converted, in order, into one part file holding
their records exactly as a shard will, with each episode's manifest record (lengths,
segment tables, fidelity, the digest of its records); a failing unit leaves no part."""

from __future__ import annotations

import json
import shutil

import pytest
from array_record.python.array_record_module import ArrayRecordReader

from jaxload.converters.files import LocalFiles
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.converters.options import encode_options
from jaxload.converters.plan import Unit
from jaxload.converters.units import UnitContext, convert_unit
from jaxload.errors import SourceError
from jaxload.format import sealing
from tests.converters.conftest import source_features

CAMERA = "observation.images.top"


def _context(root, tmp_path, codec=None):
    source = LeRobotV3Source(LocalFiles(root))
    options = encode_options(codec, None, None, None, None)
    return UnitContext(source, options, source_features(source), str(tmp_path / "tmp"), "job")


def test_a_unit_is_one_part_of_its_episodes_records(small_v3, tmp_path):
    context = _context(small_v3, tmp_path, codec="lossless")
    result = convert_unit(context, Unit(0, (0, 1), 8, 8.0, 123))
    assert (result.unit, result.input_bytes, result.part_bytes) == (0, 123, None)
    reader = ArrayRecordReader(result.part_path, "readahead_buffer_size:0")
    records = [reader.read() for _ in range(reader.num_records())]
    reader.close()
    first, second = result.episodes
    assert [first["episode_index"], second["episode_index"]] == [0, 1]
    assert (first["length"], second["dataset_from_index"]) == (5, 5)
    video = first["videos"][CAMERA]
    assert video["psnr_min"] == "inf" and video["psnr_count"] == 5  # lossless: exact
    assert video["segment_starts"] == [0, 4]  # GOPs of 4
    # frame blocks, init segment, GOPs: per episode, in order
    counts = [
        e["frame_records"] + 1 + len(e["videos"][CAMERA]["segment_starts"]) for e in (first, second)
    ]
    assert len(records) == sum(counts)
    assert first["payload_sha256"] == sealing.episode_digest(records[: counts[0]]).hex()
    assert second["payload_sha256"] == sealing.episode_digest(records[counts[0] :]).hex()
    json.dumps(result.record())  # the manifest's record is JSON


def test_a_failing_unit_leaves_no_part(small_v3, tmp_path):
    root = shutil.copytree(small_v3, tmp_path / "src")
    context = _context(root, tmp_path)
    (root / "videos/observation.images.top/chunk-000/file-000.mp4").write_bytes(b"")
    with pytest.raises(SourceError, match="empty file"):
        convert_unit(context, Unit(3, (0,), 5, 5.0, 0))
    assert list((tmp_path / "tmp").iterdir()) == []
