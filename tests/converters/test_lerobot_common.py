"""converters/lerobot_common.py: info.json's checks, the episode-row checks, data files
read once and sliced by `index`, and what both source layouts share (paths, camera sizes,
input bytes), on real files; every refusal names the file (and the episode)."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxload.converters.files import LocalFiles
from jaxload.converters.lerobot_common import (
    DataFile,
    Episode,
    check_episode_rows,
    load_info,
    read_data_file,
    read_info,
    read_parquet,
)
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.errors import SourceError

CAMERA = "observation.images.top"


def _info_dir(tmp_path, info):
    (tmp_path / "meta").mkdir(exist_ok=True)
    text = info if isinstance(info, str) else json.dumps(info)
    (tmp_path / "meta" / "info.json").write_text(text)
    return LocalFiles(tmp_path)


@pytest.fixture
def info(small_v3):
    return json.loads((small_v3 / "meta/info.json").read_text())


def test_load_info_says_what_is_not_a_dataset(tmp_path):
    with pytest.raises(SourceError, match=r"nope: no such dataset directory"):
        load_info(LocalFiles(tmp_path / "nope"))
    with pytest.raises(SourceError, match=r"meta/info\.json: missing; .* is not a LeRobot"):
        load_info(LocalFiles(tmp_path))
    with pytest.raises(SourceError, match=r"meta/info\.json: not valid JSON"):
        load_info(_info_dir(tmp_path, "{"))
    with pytest.raises(SourceError, match=r"meta/info\.json: not a JSON object"):
        load_info(_info_dir(tmp_path, "[1]"))


def test_read_info_checks_version_fields_and_cameras(tmp_path, info):
    assert read_info(_info_dir(tmp_path, info), ("v3.0",))["fps"] == 10
    with pytest.raises(SourceError, match=r"codebase_version 'v3\.0' is not supported"):
        read_info(_info_dir(tmp_path, info), ("v2.1",))
    for key in ("fps", "data_path"):
        broken = {k: v for k, v in info.items() if k != key}
        with pytest.raises(SourceError, match=rf"info\.json: required field '{key}' missing"):
            read_info(_info_dir(tmp_path, broken), ("v3.0",))
    with pytest.raises(SourceError, match="has video features but no 'video_path'"):
        read_info(_info_dir(tmp_path, {**info, "video_path": None}), ("v3.0",))


def test_read_info_refuses_depth_maps_and_non_rgb_cameras(tmp_path, info):
    camera = info["features"][CAMERA]
    depth = {**camera, "info": {**camera["info"], "video.is_depth_map": True}}
    with pytest.raises(SourceError, match=rf"feature '{CAMERA}' is a depth map"):
        read_info(_info_dir(tmp_path, _with(info, CAMERA, depth)), ("v3.0",))
    gray = {**camera, "shape": [48, 64, 1]}
    with pytest.raises(SourceError, match=r"has shape \[48, 64, 1\]; .* 3-channel"):
        read_info(_info_dir(tmp_path, _with(info, CAMERA, gray)), ("v3.0",))
    with pytest.raises(SourceError, match="feature 'x' has no dtype or shape"):
        read_info(_info_dir(tmp_path, _with(info, "x", {"dtype": "float32"})), ("v3.0",))


def _with(info, key, feature):
    return {**info, "features": {**info["features"], key: feature}}


def test_camera_size_reads_hwc_and_chw(tmp_path, small_v3, info):
    source = LeRobotV3Source(LocalFiles(small_v3))
    assert source.camera_size(CAMERA) == (48, 64)
    source.features = _with(
        info, CAMERA, {"shape": [3, 48, 64], "names": ["channels", "height", "width"]}
    )["features"]
    assert source.camera_size(CAMERA) == (48, 64)
    assert source.source_codec(CAMERA) == "unknown"  # no video.codec in that feature


def test_source_answers_shared_questions(small_v3):
    source = LeRobotV3Source(LocalFiles(small_v3))
    assert source.source_codec(CAMERA) == "h264"
    assert source.row(1) == {
        "episode_index": 1,
        "length": 3,
        "dataset_from_index": 5,
        "dataset_to_index": 8,
        "tasks": list(source.episode(1).tasks),
    }
    columns = source.tabular_columns(["index", "timestamp", "action", "episode_index"])
    assert columns[-3:] == ["timestamp", "episode_index", "index"] and "action" in columns
    files = source.episode_files(1)
    assert files[0].endswith(".parquet") and files[1].endswith(".mp4") and len(files) == 2
    # both episodes share one data file and one mp4: each gets its share by frame count
    sizes = source.input_bytes([0, 1])
    total = sum(source.files.size(rel) for rel in files)
    assert sizes[0] == int(total * 5 / 8) and sizes[1] == int(total * 3 / 8)
    assert len(source.meta_digest()) == 64


def test_path_of_refuses_a_template_it_cannot_fill(small_v3):
    source = LeRobotV3Source(LocalFiles(small_v3))
    source.info = {**source.info, "data_path": "data/{episode_chunk}/{0}.parquet"}
    with pytest.raises(SourceError, match=r"info\.json: data_path .* cannot be filled"):
        source.path_of("data_path", chunk_index=0, file_index=0)


def _rows(index, episode, frame):
    return pa.table({"index": index, "episode_index": episode, "frame_index": frame})


def test_check_episode_rows_names_file_and_episode():
    ep = Episode(index=3, length=3, start=10, tasks=("t",))
    check_episode_rows(_rows([10, 11, 12], [3, 3, 3], [0, 1, 2]), ep, "f.parquet")
    bad = {
        "should have 3 rows": _rows([10, 11], [3, 3], [0, 1]),
        "episode 3: column 'index' is not sorted": _rows([10, 12, 11], [3, 3, 3], [0, 1, 2]),
        "first frame has index 11, expected 10": _rows([11, 12, 13], [3, 3, 3], [0, 1, 2]),
        "rows of index 10..12 are not episode 3": _rows([10, 11, 12], [3, 4, 3], [0, 1, 2]),
        "frame_index is not 0..2": _rows([10, 11, 12], [3, 3, 3], [0, 2, 1]),
    }
    for message, table in bad.items():
        with pytest.raises(SourceError, match=rf"^f\.parquet: .*{message}"):
            check_episode_rows(table, ep, "f.parquet")


def test_data_file_rows_by_index_sorted_or_not():
    table = _rows([5, 6, 7, 0, 1], [1, 1, 1, 0, 0], [0, 1, 2, 0, 1])
    assert DataFile(table).rows(5, 3)["index"].to_pylist() == [5, 6, 7]
    assert DataFile(table).rows(0, 2)["index"].to_pylist() == [0, 1]
    ordered = DataFile(_rows([0, 1, 5, 6], [0, 0, 1, 1], [0, 1, 0, 1]))
    assert ordered.rows(5, 2)["frame_index"].to_pylist() == [0, 1]
    assert ordered.rows(2, 3).num_rows == 0


def test_read_data_file_is_read_again_after_a_change_in_place(tmp_path):
    path = tmp_path / "d.parquet"
    table = pa.table({"index": [0, 1], "episode_index": [0, 0], "frame_index": [0, 1]})
    pq.write_table(table.append_column("timestamp", pa.array([0.0, 0.1])), path)
    first = read_data_file(path, "d")
    assert read_data_file(path, "d") is first  # cached
    pq.write_table(table.append_column("timestamp", pa.array([0.0, 0.5])), path)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert read_data_file(path, "d").table["timestamp"].to_pylist() == [0.0, 0.5]
    pq.write_table(table, path)
    with pytest.raises(SourceError, match="d: column 'timestamp' missing"):
        read_data_file(path, "d")


def test_read_parquet_missing_or_corrupt(tmp_path):
    with pytest.raises(SourceError, match=r"^where: missing"):
        read_parquet(tmp_path / "none.parquet", "where")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.raises(SourceError, match=r"bad\.parquet: unreadable parquet"):
        read_parquet(tmp_path / "bad.parquet")


def test_data_schema_of_a_corrupt_file_names_it(small_v3, tmp_path):
    root = shutil.copytree(small_v3, tmp_path / "src")
    source = LeRobotV3Source(LocalFiles(root))
    rel = source.data_file(0)
    assert "action" in source.data_schema(0).names
    (root / rel).write_bytes(b"garbage")
    with pytest.raises(SourceError, match=rf"{rel}: unreadable parquet"):
        source.data_schema(0)
    assert source.num_episodes == 2


def test_data_file_rows_by_binary_search_or_in_file_order():
    index = pa.array([10, 11, 12, 13, 14])
    table = pa.Table.from_batches(
        [pa.record_batch({"index": index.slice(i, 1), "v": pa.array([i])}) for i in range(5)]
    )  # one chunk per row, as lerobot's row group per episode
    assert DataFile(table).rows(11, 3)["v"].to_pylist() == [1, 2, 3]
    unsorted = pa.table({"index": [13, 10, 12, 11, 14], "v": [0, 1, 2, 3, 4]})
    assert DataFile(unsorted).rows(11, 3)["v"].to_pylist() == [0, 2, 3]  # as filtered
