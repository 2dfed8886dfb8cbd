"""`jaxload doctor`: one line per check, exit status = number of failed checks."""

import shutil

import pytest

from jaxload import format as fmt
from jaxload.cli import main
from jaxload.converters.convert import convert
from tests.support.lerobot_factory import write_lerobot_v3

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("doctor")
    good = write_lerobot_v3(root / "good", episode_lengths=(4, 6, 3), episodes_per_video_file=2)
    short = write_lerobot_v3(root / "short", episode_lengths=(4, 6, 1), episodes_per_video_file=2)
    dataset = root / "ds"
    convert(good, dataset, workers=1, progress=False)
    return good, short, dataset


def _doctor(path, capsys):
    status = main(["doctor", str(path)])
    return status, capsys.readouterr().out


def test_healthy_source_and_dataset_pass(sources, capsys):
    good, _, dataset = sources
    status, out = _doctor(good, capsys)
    assert status == 0, out
    assert "LeRobot source" in out and out.count("[  ok]") == 7
    status, out = _doctor(dataset, capsys)
    assert status == 0, out
    assert "jaxload dataset" in out and out.count("[  ok]") == 8


def test_short_video_is_found_and_named(sources, tmp_path, capsys):
    good, short, _ = sources
    src = shutil.copytree(good, tmp_path / "src")
    video = "videos/observation.images.top/chunk-000/file-001.mp4"
    shutil.copyfile(short / video, src / video)
    status, out = _doctor(src, capsys)
    assert status == 1
    assert "file-001.mp4: holds 1 frames, but episode 2" in out and "2 frames short" in out


def test_orphan_rows_are_found(sources, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = shutil.copytree(sources[0], tmp_path / "src")
    path = src / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    extra = table.slice(0, 1)
    extra = extra.set_column(table.column_names.index("index"), "index", [[999]])
    pq.write_table(pa.concat_tables([table, extra]), path)
    status, out = _doctor(src, capsys)
    assert status == 1 and "1 orphan rows" in out


def test_missing_metadata_fails_first_check_and_skips_the_rest(sources, tmp_path, capsys):
    src = shutil.copytree(sources[0], tmp_path / "src")
    (src / "meta/info.json").unlink()
    status, out = _doctor(src, capsys)
    assert status == 1
    assert "[FAIL] metadata loads" in out and out.count("[skip]") == 6


def test_corrupt_shard_is_found(sources, tmp_path, capsys):
    dataset = shutil.copytree(sources[2], tmp_path / "ds")
    shard = dataset / fmt.shard_path(0)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    status, out = _doctor(dataset, capsys)
    assert status == 1, out
    failure = next(line for line in out.splitlines() if line.startswith("[FAIL]"))
    assert "shard-00000.array_record" in failure or "does not match its fingerprint" in failure


def test_missing_shard_is_found(sources, tmp_path, capsys):
    dataset = shutil.copytree(sources[2], tmp_path / "ds")
    (dataset / fmt.shard_path(0)).unlink()
    status, out = _doctor(dataset, capsys)
    assert status == 1 and "shard-00000.array_record: shard file missing" in out


def test_episode_table_that_contradicts_info_json_is_found(sources, tmp_path, capsys):
    import json

    dataset = shutil.copytree(sources[2], tmp_path / "ds")
    info = json.loads((dataset / fmt.INFO_PATH).read_text())
    info["total_frames"] += 1
    (dataset / fmt.INFO_PATH).write_text(json.dumps(info))
    status, out = _doctor(dataset, capsys)
    assert status == 1, out
    failure = next(line for line in out.splitlines() if line.startswith("[FAIL]"))
    assert "episode table matches info.json" in failure and "episodes.parquet" in failure
    assert "13 frames, but meta/info.json says 3 / 14" in failure and out.count("[skip]") == 6


# --- the silent-data cases of issue #33 --------------------------------------------------------


def _other_conversion(source, root):
    """A conversion of `source` with other action values: same structure, same video."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    other = shutil.copytree(source, root / "other-src")
    for data in sorted((other / "data").rglob("*.parquet")):
        table = pq.read_table(data)
        action = table["action"].combine_chunks()
        values = pc.add(action.values, pa.scalar(1.0, action.values.type))
        moved = pa.FixedSizeListArray.from_arrays(values, action.type.list_size)
        pq.write_table(table.set_column(table.column_names.index("action"), "action", moved), data)
    return convert(other, root / "other", workers=1, progress=False).out


def _failure(out):
    return next(line for line in out.splitlines() if line.startswith("[FAIL]"))


@pytest.mark.parametrize("how", ["copied", "symlinked"])
def test_a_shard_of_another_conversion_is_found(sources, tmp_path, capsys, how):
    good, _, dataset = sources
    dataset = shutil.copytree(dataset, tmp_path / "ds")
    other = _other_conversion(good, tmp_path)
    shard = dataset / fmt.shard_path(0)
    shard.unlink()
    if how == "copied":
        shutil.copyfile(other / fmt.shard_path(0), shard)
    else:
        shard.symlink_to(other / fmt.shard_path(0))
    status, out = _doctor(dataset, capsys)
    assert status == 1, out
    failure = _failure(out)
    assert "every shard exists" in failure and "shard-00000.array_record: record 0" in failure
    assert "another conversion's" in failure


def test_a_gop_table_shifted_by_one_frame_is_found(sources, tmp_path, capsys):
    import pyarrow.parquet as pq

    dataset = shutil.copytree(sources[2], tmp_path / "ds")
    column = fmt.segment_column("observation.images.top", "segment_starts")
    table = pq.read_table(dataset / fmt.EPISODES_PATH)
    starts = table[column].to_pylist()
    assert starts[1] == [0, 2, 4]  # 6 frames of the source's GOP 2, copied by default
    starts[1] = [0, 3, 5]
    table = table.set_column(table.column_names.index(column), column, [starts])
    pq.write_table(table, dataset / fmt.EPISODES_PATH)
    status, out = _doctor(dataset, capsys)
    assert status == 1, out
    failure = _failure(out)
    assert "episode table matches info.json" in failure
    assert f"column {column} is not what the records were written with" in failure


@pytest.mark.parametrize("fps", [0, -10])
def test_fps_not_above_zero_is_found(sources, tmp_path, capsys, fps):
    import json

    dataset = shutil.copytree(sources[2], tmp_path / "ds")
    info = json.loads((dataset / fmt.INFO_PATH).read_text())
    info["fps"] = fps
    (dataset / fmt.INFO_PATH).write_text(json.dumps(info))
    status, out = _doctor(dataset, capsys)
    assert status == 1, out
    assert "[FAIL] metadata loads" in out and f"info.json: fps is {fps}" in out


def test_features_in_another_order_are_no_fault(sources, tmp_path, capsys):
    """info.json re-saved with sorted keys: frame rows are laid out by sorted names, so the
    data is what was converted and every check passes (saying so)."""
    import json

    dataset = shutil.copytree(sources[2], tmp_path / "ds")
    info = json.loads((dataset / fmt.INFO_PATH).read_text())
    info["features"] = dict(reversed(info["features"].items()))
    (dataset / fmt.INFO_PATH).write_text(json.dumps(info, indent=2, sort_keys=True))
    status, out = _doctor(dataset, capsys)
    assert status == 0, out
    assert out.count("[  ok]") == 8 and "frame rows by sorted feature names" in out
