"""The episode and task tables as numpy columns: what they hold matches meta/episodes.parquet
for fixed and variable GOPs, every check still fires (on any episode, not only the first),
and a dataset pickles as a reference to shared columns."""

import gc
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import jaxload
from jaxload import format as fmt
from jaxload.converters.convert import convert
from jaxload.errors import DatasetChangedError, DatasetError
from jaxload.format import columns as columns_module
from jaxload.format.episodes import Segments, load_episodes
from jaxload.format.storage import LocalDirectory
from tests.support.lerobot_factory import write_lerobot_v3

CAM = "observation.images.top"
LENGTHS = [3, 2, 3, 4, 5, 6, 7, 8, 9, 4, 1, 12, 3, 5, 2, 9, 7, 3, 4, 6]
TASKS = [["a"], ["b", "c"], ["c"], ["a", "b"]] * 5


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Many tiny episodes, multi-task episodes and a string feature: at GOP 4 (fixed
    GOPs) and copied (the source's GOPs of 2, variable at episode ends)."""
    root = tmp_path_factory.mktemp("episodes")
    src = write_lerobot_v3(
        root / "src",
        episode_lengths=LENGTHS,
        episode_tasks=TASKS,
        cameras={CAM: (24, 64)},
        string_features=("language",),
        episodes_per_data_file=7,
    )
    fixed = convert(src, root / "fixed", gop=4, workers=1, progress=False).out
    copied = convert(src, root / "copied", video_codec="copy", workers=1, progress=False).out
    return fixed, copied


def _parquet_rows(path):
    return pq.read_table(path / fmt.EPISODES_PATH).to_pylist()


@pytest.mark.parametrize("which, gop", [(0, 4), (1, None)])
def test_columns_hold_what_the_parquet_table_holds(converted, which, gop):
    path = converted[which]
    episodes = jaxload.open(path)._episodes
    rows = _parquet_rows(path)
    assert episodes.segments[CAM].gop == gop  # fixed GOPs keep no per-GOP column
    assert episodes.length.tolist() == [r["length"] for r in rows] == LENGTHS
    assert episodes.start.tolist() == [r["dataset_from_index"] for r in rows]
    for row, r in enumerate(rows):
        starts = r[fmt.segment_column(CAM, "segment_starts")]
        assert episodes.segments[CAM].starts(row).tolist() == starts
        assert episodes.segments[CAM].count(row) == len(starts)
        assert episodes.record_start[CAM][row] == r[fmt.segment_column(CAM, "record_start")]
        assert episodes.tasks[row] == r["tasks"] == TASKS[row]
        assert episodes.strings["language"][row] == r[fmt.strings_column("language")]
        frames = np.arange(r["length"])
        segment, local = episodes.segments[CAM].locate(np.full_like(frames, row), frames)
        expected = np.searchsorted(starts, frames, side="right") - 1
        assert segment.tolist() == expected.tolist()
        assert (local == frames - np.asarray(starts)[expected]).all()


def test_fixed_and_variable_gop_tables_locate_alike():
    lengths = np.array([1, 4, 5, 9, 12])
    starts = [np.arange(0, n, 4) for n in lengths]
    first = np.r_[0, np.cumsum([len(s) for s in starts])]
    begin = np.cumsum(lengths) - lengths
    columns = columns_module.Columns(
        {
            "length": lengths,
            "start": begin,
            "gops/c/first": first,
            "gops/c/position": np.concatenate(starts) + np.repeat(begin, np.diff(first)),
        }
    )
    fixed, variable = Segments(columns, "c", 4), Segments(columns, "c", None)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    frames = np.concatenate([np.arange(n) for n in lengths])
    for a, b in zip(fixed.locate(rows, frames), variable.locate(rows, frames), strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(fixed.counts(), variable.counts())
    assert [fixed.frames(3, s) for s in range(3)] == [variable.frames(3, s) for s in range(3)]


def _corrupt(path, column, row, value):
    table = pq.read_table(path / fmt.EPISODES_PATH)
    values = table[column].to_pylist()
    values[row] = value
    table = table.set_column(table.schema.get_field_index(column), column, [values])
    pq.write_table(table, path / fmt.EPISODES_PATH)


@pytest.mark.parametrize(
    "column, value, message",
    [
        (
            "segment_starts",
            [0, 4, 4],
            "episode 11, camera .*: GOP starts \\[0, 4, 4\\] do not tile",
        ),
        ("segment_starts", [1, 4, 8], "episode 11, camera .*: GOP starts \\[1, 4, 8\\]"),
        ("segment_starts", [0, 4, 12], "GOP starts \\[0, 4, 12\\] do not tile its 12 frames"),
        ("segment_starts", [], "episode 11, camera .*: GOP starts \\[\\] do not tile"),
        ("record_start", 10**6, "episode 11, camera .*: records start at 1000000"),
        ("length", 0, r"frames, but meta/info\.json says"),
    ],
)
def test_every_episode_is_checked_not_only_the_first(converted, tmp_path, column, value, message):
    path = tmp_path / "ds"
    shutil.copytree(converted[1], path)
    name = column if column == "length" else fmt.segment_column(CAM, column)
    _corrupt(path, name, 11, value)
    with pytest.raises(DatasetError, match=message) as error:
        jaxload.open(path)
    assert fmt.EPISODES_PATH in str(error.value)


def test_edited_lists_and_missing_values_are_refused(converted, tmp_path):
    path = tmp_path / "ds"
    shutil.copytree(converted[0], path)
    _corrupt(path, "tasks", 3, None)  # read as no tasks, which is not what was converted
    with pytest.raises(DatasetError, match="column tasks is not what the records were written"):
        jaxload.open(path)
    _corrupt(path, "tasks", 4, ["x", None])
    with pytest.raises(DatasetError, match="column tasks has missing values"):
        jaxload.open(path)


def test_a_process_reads_a_table_once_while_it_is_used(converted, tmp_path):
    path = tmp_path / "ds"
    shutil.copytree(converted[0], path)
    ds = jaxload.open(path)
    again = jaxload.open(path, episodes=[2, 3])
    assert again._episodes is ds._episodes and again._tasks is ds._tasks
    _corrupt(path, "length", 0, 2)  # another file now: read (and checked) again
    with pytest.raises(DatasetError, match=r"frames, but meta/info\.json says"):
        jaxload.open(path)


def test_make_loader_reuses_the_tables_of_an_opened_dataset(converted):
    ds = jaxload.open(converted[0])
    kw = dict(global_batch_size=4, host_index=0, host_count=1)
    with jaxload.make_loader(converted[0], **kw) as by_path:  # the same file: no second copy
        opened = by_path.datasets[0]
        assert opened._episodes is ds._episodes and opened._tasks is ds._tasks
    with jaxload.make_loader(ds, **kw) as given:
        assert given.datasets[0] is ds
        next(given)


def test_a_dataset_pickles_as_a_reference_to_shared_columns(converted, tmp_path):
    path = tmp_path / "ds"
    shutil.copytree(converted[0], path)
    ds = jaxload.open(path, delta_timestamps={"action": [0.0, 0.1]})
    data = pickle.dumps(ds)
    name = ds._episodes.columns.shared_name
    assert os.path.exists(os.path.join(columns_module.SHM_DIR, name))
    assert len(data) < 20_000
    expected = ds.__getitems__(range(len(ds)))
    other = pickle.loads(data)
    assert other._episodes.columns.shared_name == name
    _same_samples(other.__getitems__(range(len(ds))), expected)

    del ds, other
    gc.collect()
    assert not os.path.exists(os.path.join(columns_module.SHM_DIR, name))
    # Columns gone (the pickle outlived its process's dataset): the table is read again.
    _same_samples(pickle.loads(data).__getitems__(range(len(expected))), expected)
    gc.collect()
    info = fmt.read_info(path)
    fmt.write_json_atomic(path / fmt.INFO_PATH, info.to_json() | {"fingerprint": "0" * 64})
    with pytest.raises(DatasetChangedError, match="changed on disk"):
        pickle.loads(data)


def test_load_episodes_is_what_the_reader_reads(converted):
    storage = LocalDirectory(converted[0])
    episodes = load_episodes(storage, fmt.read_info(storage))
    assert episodes is jaxload.open(converted[0])._episodes or len(episodes) == len(LENGTHS)
    assert episodes.where(3).endswith("shard-00000.array_record: episode 3")
    assert episodes.locate(0, 2) == "episode 0, camera observation.images.top, frames 0..2"
    assert episodes.locate(0, 3) == "episode 1, frames 0..1 (tabular block)"


def _same_samples(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == b[k] if isinstance(a[k], str) else np.array_equal(a[k], b[k]), k


@pytest.mark.processes
def test_worker_processes_map_the_tables_instead_of_copying_them(converted):
    from jaxload.workers.processes import worker_pids

    options = jaxload.PipelineOptions(num_workers=1)
    kw = dict(global_batch_size=4, host_index=0, host_count=1, options=options)
    with jaxload.make_loader(converted[0], **kw) as loader:
        next(loader)
        ds = loader.datasets[0]
        names = [ds._episodes.columns.shared_name, ds._tasks.columns.shared_name]
        pids = worker_pids()
        assert pids and all(names)
        for pid in pids:
            maps = Path(f"/proc/{pid}/maps").read_text()
            assert all(name in maps for name in names), pid


@pytest.mark.processes
def test_opening_and_reading_import_no_pandas(converted):
    """pyarrow imports pandas (0.25 s of CPU) at its first `pa.array` or compute call, when
    pandas is installed: opening a dataset and serving a batch make none (make_loader's
    CPU at DROID's shape, benchmarks/RESULTS.md "make_loader(path) alone, after 9c32171")."""
    code = (
        "import sys, jaxload\n"
        f"loader = jaxload.make_loader({str(converted[0])!r}, global_batch_size=4,"
        " host_index=0, host_count=1, delta_frames={'action': [0, 1]},"
        " options=jaxload.PipelineOptions(num_workers=0))\n"
        "next(loader); loader.close()\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
