"""The on-disk layout (jaxload.format.layout): paths, record numbering and sealing, frame
rows, meta/info.json parsed and checked, atomic writes. The content fingerprint, hashed as
it is written, is the sha256 of the canonical JSON it always was (fingerprints of existing
datasets, and checkpoints that remember them, stay valid)."""

import dataclasses
import hashlib
import json
import os

import numpy as np
import pytest

from jaxload import format as fmt
from jaxload.errors import DatasetError
from jaxload.format.reader import read_tasks


def _canonical(fps, features, cameras, episodes, records, strings=None):
    """The fingerprint as jaxload computed it before it was streamed."""
    content = {
        "fps": fps,
        "features": {k: f.to_json() for k, f in features.items()},
        "cameras": {k: c.to_json() for k, c in cameras.items()},
        "episodes": [[int(e), int(n), list(t)] for e, n, t in episodes],
        "records": records,
    }
    if strings:
        content["strings"] = {k: [list(v) for v in per_ep] for k, per_ep in strings.items()}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


FEATURES = {
    "observation.state": fmt.Feature("float32", (8,), ["j0", "j1"]),
    "language": fmt.Feature("string", ()),
    "index": fmt.Feature("int64", ()),
}
CAMERAS = {"wrist": fmt.Camera("h264", 96, 128, "yuv420p", 4, 14, "av1")}


@pytest.mark.parametrize(
    "episodes, strings",
    [
        ([], None),
        ([(0, 5, ["pick"]), (3, 1, []), (7, 12, ["place ünïcode", 'a\\"b'])], None),
        ([(0, 2, ["x"]), (1, 3, ["y"])], {"language": [["a", "b"], []], "b": [["é"], ["c"]]}),
        ([(0, 2, ["x"])], {}),
    ],
)
def test_streamed_fingerprint_is_the_canonical_json_hash(episodes, strings):
    streamed = fmt.content_fingerprint(
        30,
        FEATURES,
        CAMERAS,
        iter(episodes),
        "ab" * 32,
        None if strings is None else {k: iter(v) for k, v in strings.items()},
    )
    assert streamed == _canonical(30, FEATURES, CAMERAS, episodes, "ab" * 32, strings)


# --- records: where they are and how they are sealed ------------------------------------


def test_paths_and_record_numbering():
    assert fmt.shard_path(7) == "data/shard-00007.array_record"
    assert fmt.offsets_path(12345) == "data/shard-12345.offsets"
    assert [fmt.num_blocks(n) for n in (1, 32, 33, 64, 65)] == [1, 1, 2, 2, 3]
    assert fmt.camera_record_count(3) == 4  # the init segment, then the GOPs
    np.testing.assert_array_equal(fmt.segment_record(10, np.arange(3)), [11, 12, 13])
    assert fmt.segment_column("top", "record_start") == "videos/top/record_start"
    assert fmt.strings_column("language") == "strings/language"


def test_a_sealed_record_unseals_only_at_its_own_position_and_key():
    stored = fmt.seal_record(b"payload", 99, 1, 17)
    assert len(stored) == len(b"payload") + fmt.RECORD_CHECK_BYTES
    assert fmt.unseal_record(stored, 99, 1, 17) == b"payload"
    assert fmt.unseal_record(stored, 99, 1, 18) is None  # another record
    assert fmt.unseal_record(stored, 99, 0, 17) is None  # another shard
    assert fmt.unseal_record(stored, 98, 1, 17) is None  # another conversion
    flipped = bytes([stored[0] ^ 1]) + stored[1:]
    assert fmt.unseal_record(flipped, 99, 1, 17) is None
    assert fmt.unseal_record(stored[:7], 99, 1, 17) is None  # shorter than a checksum
    assert fmt.unseal_record(fmt.seal_record(b"", 5, 0, 0), 5, 0, 0) == b""


def test_frame_rows_are_packed_in_sorted_name_order_with_strings_as_indices():
    dtype = fmt.frame_dtype(
        {"z": fmt.Feature("float32", (2,)), "a": fmt.Feature(">i2", ()), "s": FEATURES["language"]}
    )
    assert dtype.names == ("a", "s", "z")
    assert dtype.itemsize == 2 + 4 + 8  # no padding
    assert dtype["a"] == np.dtype("<i2") and dtype["s"] == np.dtype("uint32")  # little-endian


def test_hash_record_counts_record_boundaries():
    one, two = hashlib.sha256(), hashlib.sha256()
    fmt.hash_record(one, b"ab")
    fmt.hash_record(one, b"c")
    fmt.hash_record(two, b"a")
    fmt.hash_record(two, b"bc")
    assert one.hexdigest() != two.hexdigest()


# --- meta/info.json --------------------------------------------------------------------


@pytest.fixture(scope="module")
def info_json(camera_converted):
    return json.loads((camera_converted / fmt.INFO_PATH).read_text())


def _parse(raw) -> fmt.DatasetInfo:
    return fmt.parse_info(json.dumps(raw).encode(), "ds/meta/info.json", "ds")


def test_info_json_round_trips_through_dataset_info(info_json):
    info = _parse(info_json)
    assert info.to_json() == {k: v for k, v in info_json.items() if k in info.to_json()}
    assert _parse(info.to_json()) == info
    assert info.checked and info.records_key == _parse(info_json).records_key


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda raw: {"codebase_version": "v3.0"},
            r"^ds is a LeRobot dataset \(v3\.0\), not a "
            r"jaxload dataset: convert it first with `jaxload convert ds OUT`",
        ),
        (lambda raw: {**raw, "format": "other"}, r"not a jaxload dataset \(format='other'\)"),
        (lambda raw: {**raw, "format_version": 5}, r"format_version 5 was written by an older"),
        (lambda raw: {**raw, "format_version": 99}, r"format_version 99 is not supported"),
        (lambda raw: {**raw, "fps": True}, r"fps is True; it must be an integer > 0"),
        (lambda raw: {**raw, "features": []}, r"features is \[\]; it must be an object"),
        (lambda raw: {**raw, "cameras": {"c": 3}}, r"cameras\.c is 3; it must be an object"),
        (
            lambda raw: {**raw, "features": {**raw["features"], "x": {"dtype": "U3", "shape": []}}},
            r"features\.x\.dtype is 'U3'; it must be a numeric numpy dtype or 'string'",
        ),
        (
            lambda raw: {**raw, "features": {"x": {"dtype": "float32", "shape": [2, -1]}}},
            r"features\.x\.shape is \[2, -1\]; it must be a list of integers >= 0",
        ),
        (
            lambda raw: {
                **raw,
                "cameras": {"c": {**next(iter(raw["cameras"].values())), "width": 0}},
            },
            r"cameras\.c\.width is 0; it must be an integer >= 1",
        ),
        (
            lambda raw: {**raw, "records": {**raw["records"], "checksum": "crc32"}},
            r"malformed metadata \(ValueError: records\.checksum 'crc32'\)",
        ),
        (
            lambda raw: {**raw, "records": {**raw["records"], "offsets_xxh3": ["a"]}},
            r"records\.offsets_xxh3 must have one entry per shard",
        ),
        (lambda raw: {k: v for k, v in raw.items() if k != "num_shards"}, r"malformed metadata"),
    ],
)
def test_bad_info_json_names_the_file_and_the_field(info_json, edit, message):
    with pytest.raises(DatasetError, match=message) as raised:
        _parse(edit(info_json))
    assert str(raised.value).startswith("ds")


def test_info_json_that_is_not_json_or_not_an_object_is_named():
    with pytest.raises(DatasetError, match=r"^ds/meta/info\.json: unreadable"):
        fmt.parse_info(b"{not json", "ds/meta/info.json", "ds")
    with pytest.raises(DatasetError, match=r"not a JSON object \(a JSON list\)"):
        fmt.parse_info(b"[1]", "ds/meta/info.json", "ds")


def test_metadata_digests_are_those_the_converter_wrote(camera_converted, info_json):
    """`with_metadata_digests` over meta/episodes.parquet and meta/tasks.parquet gives the
    digests the converter streamed while writing them."""
    import pyarrow.parquet as pq

    info = _parse(info_json)
    rows = pq.read_table(camera_converted / fmt.EPISODES_PATH).to_pylist()
    by_index = read_tasks(camera_converted)
    bare = dataclasses.replace(info, metadata_xxh3=None)
    assert fmt.with_metadata_digests(bare, rows, by_index).metadata_xxh3 == info.metadata_xxh3
    rows[1]["length"] += 1
    assert fmt.with_metadata_digests(bare, rows, by_index).metadata_xxh3 != info.metadata_xxh3


def test_the_episode_table_has_its_schema_whatever_the_rows_hold():
    row = {"episode_index": 0, "length": 3, "dataset_from_index": 0, "tasks": ["t"], "shard": 0,
           "frames_record_start": 0, "videos/c/record_start": 1, "videos/c/segment_starts": [0],
           "videos/c/psnr_min": None, "strings/lang": ["x"], "extra": 1}  # fmt: skip
    table = fmt.episodes_table([row], ["c"], ["lang"])
    assert table.num_rows == 1 and "extra" not in table.column_names
    assert str(table.schema.field("videos/c/segment_starts").type) == "list<item: int64>"


def test_atomic_writes_replace_whole_files_and_leave_no_temporary(tmp_path):
    path = tmp_path / "x.json"
    fmt.write_json_atomic(path, {"a": 1})
    fmt.write_json_atomic(path, {"b": 2})
    assert json.loads(path.read_text()) == {"b": 2} and os.listdir(tmp_path) == ["x.json"]
    with pytest.raises(OSError):
        fmt.write_bytes_atomic(tmp_path / "none" / "x", b"1")
    assert not (tmp_path / "none").exists()
