"""Records keyed by their content, metadata read by name (format 5, issue #33).

Each case here served data other than what was converted, silently or through a raw numpy
or decoder error, before records were keyed by the content and the metadata: a shard of
another conversion of the same source, an edited fingerprint, info.json re-saved with sorted
keys or its features swapped, fps <= 0, an edited shape, dtype or camera size, a GOP table
shifted by one frame. Now each one reads exactly the converted data, or raises a
DatasetError naming the file and the field at open.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

import jaxload
from jaxload import format as fmt
from jaxload.converters.convert import convert
from jaxload.errors import CorruptRecordError, DatasetError, JaxloadError
from tests.support.lerobot_factory import write_lerobot_v3

CAM = "observation.images.top"
LENGTHS = (5, 1, 2, 20)
WINDOWS = {"action": [0.0, 0.1, 0.2], CAM: [-0.1, 0.0]}


@pytest.fixture(scope="module")
def conversions(tmp_path_factory):
    """Two conversions of one source, the second with other action values (same structure,
    same video), and every sample of the first."""
    root = tmp_path_factory.mktemp("content")
    src = write_lerobot_v3(root / "src", episode_lengths=LENGTHS, cameras={CAM: (24, 64)})
    other = shutil.copytree(src, root / "other")
    data = other / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    action = table["action"].combine_chunks()
    values = pa.compute.add(action.values, pa.scalar(1.0, action.values.type))  # float32 still
    moved = pa.FixedSizeListArray.from_arrays(values, action.type.list_size)
    pq.write_table(table.set_column(table.column_names.index("action"), "action", moved), data)
    first = convert(src, root / "a", workers=1, progress=False).out
    second = convert(other, root / "b", workers=1, progress=False).out
    ds = jaxload.open(first, delta_timestamps=WINDOWS)
    return first, second, ds.__getitems__(range(len(ds)))


@pytest.fixture
def dataset(conversions, tmp_path):
    return Path(shutil.copytree(conversions[0], tmp_path / "ds"))


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] if isinstance(a[k], str) else np.array_equal(a[k], b[k]) for k in a
    )


def _read_all(path: Path, expected: list[dict]) -> JaxloadError | None:
    """The error reading every sample raised, or None when all are exactly `expected`."""
    try:
        ds = jaxload.open(path, delta_timestamps=WINDOWS)
        got = ds.__getitems__(range(len(ds)))
    except JaxloadError as e:
        return e
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert _same(a, b), f"sample {i} differs from what was converted"
    return None


def _info(path: Path) -> dict:
    return json.loads((path / fmt.INFO_PATH).read_text())


def _write_info(path: Path, info: dict, **dump) -> None:
    (path / fmt.INFO_PATH).write_text(json.dumps(info, **dump))


# --- 1. records keyed by content ----------------------------------------------------------


def test_the_conversions_differ_only_in_action_values(conversions):
    first, second, _ = conversions
    a, b = jaxload.open(first), jaxload.open(second)
    assert _info(first)["records"]["per_shard"] == _info(second)["records"]["per_shard"]
    assert _info(first)["features"] == _info(second)["features"]
    assert np.array_equal(a[3][CAM], b[3][CAM]) and not np.array_equal(
        a[3]["action"], b[3]["action"]
    )
    assert a.info.records_key != b.info.records_key


@pytest.mark.parametrize("how", ["copied", "symlinked"])
def test_a_shard_of_another_conversion_of_the_same_source_is_refused(conversions, dataset, how):
    _, second, expected = conversions
    shard = dataset / fmt.shard_path(0)
    shard.unlink()
    if how == "copied":
        shutil.copyfile(second / fmt.shard_path(0), shard)
    else:
        shard.symlink_to(second / fmt.shard_path(0))
    error = _read_all(dataset, expected)
    assert isinstance(error, CorruptRecordError), error
    assert f"{fmt.shard_path(0)}: record 0 (episode 0, frames 0..4 (tabular block))" in str(error)


def test_a_record_of_another_conversion_is_refused(conversions, dataset):
    """One frame block of the other conversion in place of ours, everything else intact."""
    _, second, expected = conversions
    shard = dataset / fmt.shard_path(0)
    ours, theirs = _records(shard), _records(second / fmt.shard_path(0))
    row = 3  # the 20-frame episode's first frame block
    number = int(jaxload.open(dataset)._episodes.frames_record_start[row])
    assert ours[number] != theirs[number] and len(ours[number]) == len(theirs[number])
    _write_records(shard, [*ours[:number], theirs[number], *ours[number + 1 :]])
    error = _read_all(dataset, expected)
    assert isinstance(error, CorruptRecordError), error
    assert f"record {number} (episode 3, frames 0..19 (tabular block))" in str(error)


def test_the_fingerprint_is_covered_by_the_record_checks(dataset, conversions):
    info = _info(dataset)
    info["fingerprint"] = _info(conversions[1])["fingerprint"]
    _write_info(dataset, info)
    with pytest.raises(CorruptRecordError, match="does not match its checksum"):
        jaxload.open(dataset)


@pytest.mark.parametrize("version", [2, 3, 4, 5])
def test_older_format_versions_are_refused_saying_to_reconvert(dataset, version):
    info = _info(dataset)
    info["format_version"] = version
    _write_info(dataset, info)
    with pytest.raises(DatasetError, match=rf"format_version {version} was written by an older"):
        jaxload.open(dataset)
    with pytest.raises(DatasetError, match=r"reconvert the source \(`jaxload convert SRC OUT`\)"):
        jaxload.open(dataset)


# --- 2. record layout from sorted names -----------------------------------------------------


def test_info_json_resaved_with_sorted_keys_serves_the_same_values(conversions, dataset):
    _write_info(dataset, _info(dataset), indent=2, sort_keys=True)
    assert list(_info(dataset)["features"]) != list(_info(conversions[0])["features"])
    assert _read_all(dataset, conversions[2]) is None


def test_two_features_swapped_serve_each_value_under_its_name(conversions, dataset):
    info = _info(dataset)
    names = list(info["features"])
    a, b = names.index("observation.state"), names.index("action")
    names[a], names[b] = names[b], names[a]
    info["features"] = {k: info["features"][k] for k in names}
    _write_info(dataset, info)
    assert _read_all(dataset, conversions[2]) is None


def test_frame_rows_are_laid_out_by_sorted_names():
    features = {"b": fmt.Feature("float32", (2,)), "a": fmt.Feature("int64", ())}
    assert fmt.frame_dtype(features).names == ("a", "b")
    assert fmt.frame_dtype(dict(reversed(features.items()))) == fmt.frame_dtype(features)


# --- 3. fields validated for meaning ---------------------------------------------------------


@pytest.mark.parametrize("fps", [0, -10, 2.5, "10", None])
def test_fps_that_is_not_a_positive_integer_is_refused_naming_it(dataset, fps):
    info = _info(dataset)
    info["fps"] = fps
    _write_info(dataset, info)
    with pytest.raises(DatasetError, match=r"meta/info\.json: fps is .*integer > 0"):
        jaxload.open(dataset)


@pytest.mark.parametrize(
    "section, key, field, value, message",
    [
        ("features", "action", "shape", [2, 2], r"features\.action is not what the records"),
        ("features", "action", "shape", [5], r"features\.action is not what the records"),
        ("features", "action", "dtype", "int32", r"features\.action is not what the records"),
        ("features", "action", "dtype", "complex64", r"features\.action\.dtype is 'complex64'"),
        ("features", "action", "shape", [-4], r"features\.action\.shape is \[-4\]"),
        ("features", "action", "dtype", "float33", r"features\.action\.dtype is 'float33'"),
        ("cameras", CAM, "height", 48, rf"cameras\.{CAM} is not what the records"),
        ("cameras", CAM, "width", 0, rf"cameras\.{CAM}\.width is 0"),
        ("cameras", CAM, "codec", "hevc", rf"cameras\.{CAM} is not what the records"),
    ],
)
def test_an_edited_shape_dtype_or_camera_is_refused_at_open_naming_it(
    dataset, section, key, field, value, message
):
    info = _info(dataset)
    info[section][key][field] = value
    _write_info(dataset, info)
    with pytest.raises(DatasetError, match=message) as error:
        jaxload.open(dataset)
    assert str(dataset / fmt.INFO_PATH) in str(error.value)


def test_a_feature_added_or_removed_in_info_json_is_named(dataset):
    info = _info(dataset)
    info["features"]["extra"] = {"dtype": "float32", "shape": [], "names": None}
    _write_info(dataset, info)
    with pytest.raises(DatasetError, match=r"features\.extra was not there when the records"):
        jaxload.open(dataset)
    del info["features"]["extra"], info["features"]["action"]
    _write_info(dataset, info)
    with pytest.raises(DatasetError, match=r"features\.action is missing"):
        jaxload.open(dataset)


def test_info_json_that_is_not_an_object_is_refused(dataset):
    _write_info(dataset, [_info(dataset)])
    with pytest.raises(DatasetError, match=r"info\.json: not a JSON object \(a JSON list\)"):
        jaxload.open(dataset)


def test_a_camera_size_resealed_to_disagree_with_the_records_fails_at_open(dataset):
    """info.json edited with its digests recomputed and every record resealed under the
    new key (a forger's work, not an accident): the first records at open still show the
    frames are 24x64."""
    from jaxload.format import sealing

    info = _info(dataset)
    info["cameras"][CAM]["height"] = 32
    old = fmt.read_info(dataset)
    parsed = {k: fmt.Camera(**v).to_json() for k, v in info["cameras"].items()}
    info["records"]["metadata_xxh3"]["cameras"] = sealing.info_digests(1, {}, parsed)["cameras"]
    key = sealing.records_key(old.record_seed, old.fingerprint, info["records"]["metadata_xxh3"])
    shard = dataset / fmt.shard_path(0)
    payloads = [fmt.unseal_record(r, old.records_key, 0, i) for i, r in enumerate(_records(shard))]
    _write_records(shard, [fmt.seal_record(p, key, 0, i) for i, p in enumerate(payloads)])
    _write_info(dataset, info)
    with pytest.raises(
        DatasetError, match=rf"cameras\.{CAM}\.height is 32, but its records hold 64x24"
    ):
        jaxload.open(dataset)


# --- 4. GOP tables against what the records were written with -------------------------------


def _set_column(path: Path, column: str, row: int, value) -> None:
    table = pq.read_table(path / fmt.EPISODES_PATH)
    values = table[column].to_pylist()
    values[row] = value
    table = table.set_column(table.schema.get_field_index(column), column, [values])
    pq.write_table(table, path / fmt.EPISODES_PATH)


def test_a_gop_table_shifted_by_one_frame_fails_at_open(dataset):
    column = fmt.segment_column(CAM, "segment_starts")
    starts = pq.read_table(dataset / fmt.EPISODES_PATH)[column].to_pylist()[3]
    assert starts == list(range(0, 20, 2))  # the source's GOPs (g 2), copied by default
    shifted = [0, *(s + 1 for s in starts[1:])]  # same count, rising, tiles 20 frames
    _set_column(dataset, column, 3, shifted)
    with pytest.raises(DatasetError, match=rf"column {column} is not what the records") as error:
        jaxload.open(dataset)
    assert str(dataset / fmt.EPISODES_PATH) in str(error.value)


@pytest.mark.parametrize("column, value", [("episode_index", 7), ("length", 19)])
def test_other_columns_edited_after_conversion_fail_at_open(dataset, column, value):
    _set_column(dataset, column, 3, value)
    info = _info(dataset)
    info["total_frames"] -= 1 if column == "length" else 0  # the totals still agree
    _write_info(dataset, info)
    with pytest.raises(DatasetError, match=rf"column {column} is not what the records"):
        jaxload.open(dataset)


def test_rows_out_of_record_order_are_refused(dataset):
    """Two episodes of as many records swap places in the table (their content columns
    stay): each row would serve the other's records, which verify at their positions."""
    table = pq.read_table(dataset / fmt.EPISODES_PATH).to_pylist()
    table[1], table[2] = table[2], table[1]
    for column in ("episode_index", "length", "dataset_from_index", "tasks"):
        table[1][column], table[2][column] = table[2][column], table[1][column]
    pq.write_table(pa.Table.from_pylist(table, pq.read_schema(dataset / fmt.EPISODES_PATH)),
                   dataset / fmt.EPISODES_PATH)  # fmt: skip
    with pytest.raises(DatasetError, match=r"\(row 1\) is not stored after the row before it"):
        jaxload.open(dataset)


# --- helpers ----------------------------------------------------------------------------------


def _records(path: Path) -> list[bytes]:
    reader = ArrayRecordReader(str(path), fmt.READER_OPTIONS)
    try:
        return reader.read_all()
    finally:
        reader.close()


def _write_records(path: Path, records: list[bytes]) -> None:
    path.unlink()
    writer = ArrayRecordWriter(str(path), fmt.WRITER_OPTIONS)
    for record in records:
        writer.write(record)
    writer.close()
