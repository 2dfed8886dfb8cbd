"""converters/doctor.py: `jaxload doctor` on a LeRobot source. Every check passes on a
healthy source; each fault is named by file and episode, and the checks after the first
failure are skipped."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxload.converters.doctor import check_source

DATA = "data/chunk-000/file-000.parquet"
VIDEO = "videos/observation.images.top/chunk-000/file-000.mp4"


@pytest.fixture
def src(small_v3, tmp_path):
    return shutil.copytree(small_v3, tmp_path / "src")


def _by_name(results):
    return {r.name.split(" ")[0]: r for r in results}


def test_a_healthy_source_passes_every_check(small_v3):
    results = check_source(small_v3)
    assert [r.status for r in results] == ["ok"] * 7
    lines = [r.line() for r in results]
    assert (
        lines[0] == "[  ok] metadata loads and codebase version is supported: codebase v3.0, fps 10"
    )
    assert lines[1].endswith(": 2 episodes tile [0, 8)")
    assert lines[3].endswith(": 1 data files") and lines[5].endswith(": 1 video files")


def test_an_unsupported_version_fails_the_first_check_and_skips_the_rest(src):
    info = json.loads((src / "meta/info.json").read_text())
    (src / "meta/info.json").write_text(json.dumps({**info, "codebase_version": "v1.6"}))
    results = check_source(src)
    assert results[0].status == "FAIL" and "codebase_version 'v1.6' is not supported" in (
        results[0].detail
    )
    assert {r.status for r in results[1:]} == {"skip"}


def test_a_timestamp_off_its_frame_is_named(src):
    table = pq.read_table(src / DATA)
    ts = table["timestamp"].to_pylist()
    ts[6] += 0.05  # episode 1, frame 1
    pq.write_table(table.set_column(table.schema.get_field_index("timestamp"), "timestamp",
                                    pa.array(ts, pa.float32())), src / DATA)  # fmt: skip
    result = _by_name(check_source(src))["timestamps"]
    assert result.status == "FAIL"
    assert f"{DATA}: episode 1: timestamp" in result.detail and "at frame 1" in result.detail


def test_orphan_rows_and_unreferenced_data_files_are_named(src):
    table = pq.read_table(src / DATA)
    orphan = table.slice(7, 1)  # a row of index 8: no episode's
    orphan = orphan.set_column(orphan.schema.get_field_index("index"), "index",
                               pa.array([8], orphan.schema.field("index").type))  # fmt: skip
    pq.write_table(pa.concat_tables([table, orphan]), src / DATA)
    result = _by_name(check_source(src))["data"]
    assert (
        result.status == "FAIL"
        and "holds 9 rows but its episodes account for 8 (1 orphan rows)" in result.detail
    )
    pq.write_table(table, src / DATA)
    shutil.copy(src / DATA, src / "data/chunk-000/file-009.parquet")
    result = _by_name(check_source(src))["data"]
    assert "file-009.parquet: data file not referenced by any episode" in result.detail


def test_a_short_or_broken_video_is_named(src, small_v3):
    info = json.loads((src / "meta/info.json").read_text())
    info["fps"] = 5  # the stream runs at 10
    (src / "meta/info.json").write_text(json.dumps(info))
    result = _by_name(check_source(src))["timestamps"]
    assert result.status == "FAIL"  # timestamps are checked first: frame_index / 5
    (src / "meta/info.json").write_text((small_v3 / "meta/info.json").read_text())
    data = (src / VIDEO).read_bytes()
    (src / VIDEO).write_bytes(data[: len(data) // 3])
    result = _by_name(check_source(src))["videos"]
    assert result.status == "FAIL" and VIDEO in result.detail
    assert "frames short" in result.detail or "unreadable video" in result.detail
    (src / VIDEO).write_bytes(b"")
    assert "empty file (video of episode" in _by_name(check_source(src))["videos"].detail
