"""converters/lerobot_v3.py: a LeRobot v3.0 source's episode metadata as columns (a child
process reads a large footer), checked to tile the frames, its tasks, and each refusal
naming the file and the episode."""

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxload.converters import lerobot_v3
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.errors import SourceError
from tests.support.lerobot_factory import write_lerobot_v3

LENGTHS = [3, 1, 4, 6, 2, 5, 2, 8, 1, 3]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("source")
    return write_lerobot_v3(
        root / "src",
        episode_lengths=LENGTHS,
        cameras={},
        episodes_per_data_file=4,
        episodes_per_meta_file=3,
    )


def _meta_rows(src):
    tables = [pq.read_table(p) for p in sorted(src.glob("meta/episodes/*/*.parquet"))]
    return sorted(pa.concat_tables(tables).to_pylist(), key=lambda r: r["episode_index"])


def test_episode_metadata_is_what_the_meta_files_say(source):
    src = LeRobotV3Source(source)
    assert src.episode_ids == list(range(len(LENGTHS)))
    for row in _meta_rows(source):
        ep = src.episode(row["episode_index"])
        assert (ep.length, ep.start, list(ep.tasks)) == (
            row["length"],
            row["dataset_from_index"],
            row["tasks"],
        )
        file = f"data/chunk-{row['data/chunk_index']:03d}/file-{row['data/file_index']:03d}.parquet"
        assert src.data_file(row["episode_index"]) == file
        frames = src.episode_frames(row["episode_index"])
        assert frames["episode_index"].to_pylist() == [row["episode_index"]] * row["length"]
    with pytest.raises(SourceError, match="no episode 99"):
        src.episode(99)


@pytest.mark.processes
def test_a_large_footer_is_read_in_a_child_process(source, monkeypatch):
    inline = LeRobotV3Source(source).episodes
    monkeypatch.setattr(lerobot_v3, "INLINE_FOOTER_BYTES", 0)
    child = LeRobotV3Source(source).episodes
    assert np.array_equal(child.index, inline.index) and child.tasks == inline.tasks
    for key in inline.files:
        assert np.array_equal(child.files[key], inline.files[key])


def test_a_gap_is_named_at_any_episode(source, tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(source, copy)
    path = sorted(copy.glob("meta/episodes/*/*.parquet"))[2]  # episodes 6..8
    table = pq.read_table(path)
    start = table["dataset_from_index"].to_pylist()
    start[1] += 1  # episode 7 starts one frame late
    table = table.set_column(table.schema.get_field_index("dataset_from_index"),
                             "dataset_from_index", [start])  # fmt: skip
    pq.write_table(table, path)
    with pytest.raises(
        SourceError,
        match=r"episode 7 starts at frame 24 but the previous episode ends at 23: .* gap",
    ):
        LeRobotV3Source(copy)


def _edit_episodes(source, tmp_path, edit):
    """A copy of `source` whose first meta/episodes file is `edit(table)`."""
    copy = shutil.copytree(source, tmp_path / "src")
    path = sorted(copy.glob("meta/episodes/*/*.parquet"))[0]
    pq.write_table(edit(pq.read_table(path)), path)
    return copy


def _set(table, name, values):
    return table.set_column(table.schema.get_field_index(name), name, [values])


def test_episode_metadata_checks_name_the_file(small_v3, tmp_path):
    # small_v3: one meta/episodes file, episodes of 5 and 3 frames
    cases = {
        "episode 0 is listed twice": lambda t: _set(t, "episode_index", [0, 0]),
        r"episode 1 has length 9 but frame range \[5, 8\)": lambda t: _set(t, "length", [5, 9]),
        r"episode metadata lacks columns \['data/file_index'\]": lambda t: t.drop_columns(
            ["data/file_index"]
        ),
        r"episode metadata has missing values in columns \['length'\]": lambda t: _set(
            t, "length", [5, None]
        ),
        "column data/chunk_index holds string values such as 'x', not integers": lambda t: _set(
            t, "data/chunk_index", ["x", "0"]
        ),
        "column data/chunk_index holds double values such as 0.5": lambda t: _set(
            t, "data/chunk_index", [0.0, 0.5]
        ),
    }
    for i, (message, edit) in enumerate(cases.items()):
        copy = _edit_episodes(small_v3, tmp_path / str(i), edit)
        with pytest.raises(
            SourceError, match=rf"meta/episodes(/chunk-000/file-000\.parquet)?: {message}"
        ):
            LeRobotV3Source(copy)
    floats = _edit_episodes(small_v3, tmp_path / "f", lambda t: _set(t, "length", [5.0, 3.0]))
    assert LeRobotV3Source(floats).episode(1).length == 3  # whole floats read as before


def test_episode_files_that_disagree_on_a_type_are_refused_by_name(source, tmp_path):
    # one of four meta files stores a column as doubles: pyarrow's ArrowTypeError, said
    copy = _edit_episodes(source, tmp_path, lambda t: _set(t, "length", [3.0, 1.0, 4.0]))
    with pytest.raises(SourceError, match="meta/episodes: episode files disagree on schema"):
        LeRobotV3Source(copy)


def test_totals_are_checked_against_info_json(source, tmp_path):
    for key, message in (
        ("total_frames", "episodes cover 35 frames but meta/info.json says total_frames=36"),
        ("total_episodes", "10 episodes but meta/info.json says total_episodes=11"),
    ):
        copy = shutil.copytree(source, tmp_path / key)
        info = json.loads((copy / "meta/info.json").read_text())
        info[key] += 1
        (copy / "meta/info.json").write_text(json.dumps(info))
        with pytest.raises(SourceError, match=rf"meta/episodes: {message}"):
            LeRobotV3Source(copy)


def test_tasks_and_missing_metadata(source, tmp_path):
    src = LeRobotV3Source(source)
    assert src.tasks[0] == src.episode(0).tasks[0] and src.stats_json() is not None
    assert src.meta_files()[0] == "meta/info.json" and len(src.meta_files()) == 2 + 4
    assert sum(src.data_file_rows().values()) == sum(LENGTHS)
    copy = shutil.copytree(source, tmp_path / "t")
    pq.write_table(pa.table({"task": ["a"]}), copy / "meta/tasks.parquet")
    with pytest.raises(SourceError, match=r"meta/tasks\.parquet: no task_index column"):
        LeRobotV3Source(copy)
    pq.write_table(pa.table({"task_index": [0]}), copy / "meta/tasks.parquet")
    with pytest.raises(SourceError, match=r"meta/tasks\.parquet: no task string column"):
        LeRobotV3Source(copy)
    (copy / "meta/tasks.parquet").unlink()
    with pytest.raises(SourceError, match=r"meta/tasks\.parquet: missing"):
        LeRobotV3Source(copy)
    shutil.rmtree(copy / "meta/episodes")
    with pytest.raises(SourceError, match="meta/episodes: no episode metadata files"):
        LeRobotV3Source(copy)
