"""Fault injection on a converted dataset: every file corrupted in every way we know of,
and a dataset replaced under its reader. The rule checked each time: an error naming the
file (and record or episode where there is one), or exactly the original data; never
different data.

Real files throughout: the shared fixture `h264_single` converted by the real converter,
shards rewritten with ArrayRecord's own writer, a real loader with worker processes.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

import jaxload
from jaxload import format as fmt
from jaxload.converters.convert import convert
from jaxload.errors import CorruptRecordError, DatasetChangedError, DatasetError, JaxloadError
from jaxload.tools.doctor import check_dataset

pytestmark = pytest.mark.integration

SHARD = fmt.shard_path(0)


@pytest.fixture(scope="module")
def pristine(shared_lerobot, tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    out = convert(shared_lerobot / "h264_single", root / "ds", workers=1, progress=False).out
    ds = jaxload.open(out)
    return out, ds.__getitems__(range(len(ds)))


@pytest.fixture
def dataset(pristine, tmp_path):
    """A fresh copy of the converted dataset, and every sample of the original."""
    out, samples = pristine
    copy = tmp_path / "ds"
    shutil.copytree(out, copy)
    return copy, samples


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] if isinstance(a[k], str) else np.array_equal(a[k], b[k]) for k in a
    )


def _read_everything(path: Path, expected: list[dict]) -> JaxloadError | None:
    """Reads every sample; returns the error raised, or None when all matched exactly."""
    try:
        ds = jaxload.open(path)
        for first in range(0, len(expected), 16):
            got = ds.__getitems__(range(first, min(first + 16, len(expected))))
            for offset, sample in enumerate(got):
                assert _same(sample, expected[first + offset]), f"position {first + offset}"
    except JaxloadError as e:
        return e
    return None


def _rewrite_shard(path: Path, change) -> None:
    """Rewrites a shard as a valid ArrayRecord file with `change(records)` applied."""
    reader = ArrayRecordReader(str(path), fmt.READER_OPTIONS)
    records = reader.read_all()
    reader.close()
    records = change(records)
    writer = ArrayRecordWriter(str(path), fmt.WRITER_OPTIONS)
    for record in records:
        writer.write(record)
    writer.close()


def _gop_frames(path: Path, episode_row: int = 3, segment: int = 2) -> tuple[int, int]:
    """The first and last frame of an episode's GOP record, from meta/episodes.parquet (the
    source's GOPs: copied by default)."""
    table = pq.read_table(path / fmt.EPISODES_PATH).to_pylist()[episode_row]
    starts = [*table[fmt.segment_column("observation.image", "segment_starts")], table["length"]]
    return starts[segment], starts[segment + 1] - 1


def _gop_record(path: Path, episode_row: int = 3, segment: int = 2) -> int:
    files = jaxload.format.reader.DatasetFiles(path)
    start = int(files.episodes.record_start["observation.image"][episode_row])
    return fmt.segment_record(start, segment)


@pytest.mark.parametrize("offset", [40, 200, -20])
def test_a_changed_video_record_is_refused_naming_shard_record_and_frames(dataset, offset):
    path, expected = dataset
    number = _gop_record(path)

    def flip(records):
        data = bytearray(records[number])
        for i in range(8):
            data[offset + i] ^= 0x5A
        records[number] = bytes(data)
        return records

    _rewrite_shard(path / SHARD, flip)
    error = _read_everything(path, expected)
    assert isinstance(error, CorruptRecordError), error
    first, last = _gop_frames(path)
    frames = f"frames {first}..{last}"
    assert f"{SHARD}: record {number} (episode 3, camera observation.image, {frames})" in str(error)


def test_a_record_moved_to_another_position_is_refused(dataset):
    """Two valid records swapped: each still hashes right, but not at its new position."""
    path, expected = dataset
    a, b = _gop_record(path, 2, 0), _gop_record(path, 2, 1)

    def swap(records):
        records[a], records[b] = records[b], records[a]
        return records

    _rewrite_shard(path / SHARD, swap)
    assert isinstance(_read_everything(path, expected), CorruptRecordError)


def test_a_changed_frame_block_is_refused(dataset):
    path, expected = dataset

    def flip(records):
        data = bytearray(records[0])
        data[10] ^= 1
        records[0] = bytes(data)
        return records

    _rewrite_shard(path / SHARD, flip)
    error = _read_everything(path, expected)
    assert isinstance(error, CorruptRecordError)
    assert "record 0 (episode 0, frames 0..22 (tabular block))" in str(error)


@pytest.mark.parametrize("flip_at", [100, 5000, 20000, -100])
def test_bit_flips_on_disk_never_give_different_data(dataset, flip_at):
    path, expected = dataset
    shard = path / SHARD
    data = bytearray(shard.read_bytes())
    data[flip_at] ^= 0x10
    shard.write_bytes(bytes(data))
    error = _read_everything(path, expected)  # None: the flip hit bytes no read uses
    assert error is None or SHARD in str(error), error


@pytest.mark.parametrize("keep", [0, 1000, 65536, 131072, -1])
def test_truncated_shards_are_named(dataset, keep):
    path, expected = dataset
    shard = path / SHARD
    data = shard.read_bytes()
    shard.write_bytes(data[:keep] if keep >= 0 else data[:-1])
    error = _read_everything(path, expected)
    assert isinstance(error, DatasetError), error
    assert SHARD in str(error)


def test_a_deleted_shard_is_named(dataset):
    path, expected = dataset
    (path / SHARD).unlink()
    error = _read_everything(path, expected)
    assert isinstance(error, DatasetError) and f"{SHARD}: shard file missing" in str(error)


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("length", -5, "6 episodes / 181 frames, but meta/info.json says 6 / 209"),
        ("length", 10**12, "frames, but meta/info.json says"),
        ("frames_record_start", 3, "camera observation.image: records start at 1, expected 4"),
        ("videos/observation.image/record_start", 999, "records start at 999"),
        ("shard", 1, "has shard 1"),
    ],
)
def test_a_corrupt_episode_table_is_refused_at_open(dataset, column, value, message):
    path, _ = dataset
    table = pq.read_table(path / fmt.EPISODES_PATH)
    values = table[column].to_pylist()
    values[0] = value
    table = table.set_column(table.schema.get_field_index(column), column, [values])
    pq.write_table(table, path / fmt.EPISODES_PATH)
    with pytest.raises(DatasetError, match=message) as error:
        jaxload.open(path)
    assert fmt.EPISODES_PATH in str(error.value)


def test_a_record_count_that_disagrees_with_info_json_is_refused(dataset):
    path, _ = dataset
    info = json.loads((path / fmt.INFO_PATH).read_text())
    count = info["records"]["per_shard"][0]
    info["records"]["per_shard"][0] += 1
    (path / fmt.INFO_PATH).write_text(json.dumps(info))
    with pytest.raises(
        DatasetError, match=rf"episodes end at record {count}, but meta/info\.json says"
    ):
        jaxload.open(path)


def test_a_dataset_replaced_under_its_reader_is_refused(dataset, shared_lerobot, tmp_path):
    """`rm -rf live && mv live_new live` with a reconversion at another GOP: the open reader
    raises DatasetChangedError instead of serving the new version's frames."""
    path, expected = dataset
    ds = jaxload.open(path)
    assert _same(ds[0], expected[0])
    ds._readers.close()  # a new thread (or worker) opens the shards afresh
    other = convert(
        shared_lerobot / "h264_single", tmp_path / "new", gop=8, workers=1, progress=False
    ).out
    shutil.rmtree(path)
    shutil.move(other, path)
    with pytest.raises(DatasetChangedError, match="another version than the one opened"):
        ds.__getitems__(range(len(expected)))


@pytest.mark.processes
def test_a_loader_with_workers_names_the_corrupt_record(dataset):
    path, _ = dataset
    number = _gop_record(path)

    def flip(records):
        data = bytearray(records[number])
        data[60] ^= 0xFF
        records[number] = bytes(data)
        return records

    _rewrite_shard(path / SHARD, flip)
    loader = jaxload.make_loader(
        path, global_batch_size=16, num_epochs=1, options=jaxload.PipelineOptions(num_workers=2)
    )
    with pytest.raises(Exception) as error, loader:
        for _ in loader:
            pass
    assert f"record {number} (episode 3, camera observation.image" in str(error.value)


def test_doctor_names_the_corrupt_record(dataset):
    path, _ = dataset
    number = _gop_record(path)
    _rewrite_shard(
        path / SHARD, lambda r: [*r[:number], r[number][:-9] + b"x" * 9, *r[number + 1 :]]
    )
    failed = [r for r in check_dataset(path) if r.status == "FAIL"]
    assert len(failed) == 1 and f"record {number} (episode 3" in failed[0].detail


def test_a_dataset_of_an_older_format_is_refused_saying_to_reconvert(dataset):
    """Versions before 5 keyed their record checksums by the source's metadata, not the
    content (a record of another conversion of the same source passed): refused, never
    read unverified (tests/format/test_content_keys.py has the cases)."""
    path, expected = dataset
    _rewrite_shard(path / SHARD, lambda records: [r[: -fmt.RECORD_CHECK_BYTES] for r in records])
    info = json.loads((path / fmt.INFO_PATH).read_text())
    info["format_version"] = 2
    del info["records"]
    (path / fmt.INFO_PATH).write_text(json.dumps(info))
    error = _read_everything(path, expected)
    assert isinstance(error, DatasetError) and "reconvert the source" in str(error), error
