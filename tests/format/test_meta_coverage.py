"""Every meta/ file that changes what a batch holds is covered (format 6, issue #44).

Before format 6, meta/tasks.parquet and meta/stats.json were covered by nothing: two task
strings swapped served the wrong `task` for every frame, `action.mean` set to 1000 was used
by `Normalize`, a NaN std or an inf mean put NaN or inf into batches, and `jaxload doctor`
passed. Now the task table's digest is part of the record key (`records.metadata_xxh3.tasks`),
the stats files' digests are in info.json (`stats_xxh3`), every stats entry is checked where
it is read (finite, std >= 0, its feature's shape), and doctor computes the tabular stats
again from the records.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jaxload
from jaxload import format as fmt
from jaxload.converters.convert import convert
from jaxload.errors import DatasetError
from jaxload.format import sealing
from jaxload.stats import load_stats
from jaxload.tools.doctor import check_dataset
from jaxload.transforms import Normalize
from tests.support.lerobot_factory import write_lerobot_v3

CAM = "observation.images.top"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("meta")
    src = write_lerobot_v3(root / "src", episode_lengths=(5, 1, 2, 20), cameras={CAM: (24, 64)})
    return convert(src, root / "out", workers=1, progress=False).out


@pytest.fixture
def dataset(converted, tmp_path):
    return Path(shutil.copytree(converted, tmp_path / "ds"))


def _doctor_failure(path: Path) -> str:
    failed = [r for r in check_dataset(path) if r.status == "FAIL"]
    assert failed, "doctor passed"
    return failed[0].line()


def _tasks(path: Path) -> pa.Table:
    return pq.read_table(path / fmt.TASKS_PATH)


def test_the_converted_dataset_passes(converted):
    ds = jaxload.open(converted)
    assert len(set(ds.tasks.values())) == 2
    assert {s["task"] for s in ds.__getitems__(range(len(ds)))} == set(ds.tasks.values())
    assert all(r.status == "ok" for r in check_dataset(converted))
    info = json.loads((converted / fmt.INFO_PATH).read_text())
    assert info["format_version"] == 6 and sealing.TASKS in info["records"]["metadata_xxh3"]
    assert set(info["stats_xxh3"]) == {fmt.STATS_PATH, "meta/stats_sketch.npz"}


@pytest.mark.parametrize("how", ["swap strings", "swap task_index", "edit one text"])
def test_an_edited_task_table_is_refused_at_open_and_by_doctor(dataset, how):
    table = _tasks(dataset)
    tasks, index = table["task"].to_pylist(), table["task_index"].to_pylist()
    if how == "swap strings":
        tasks = tasks[::-1]
    elif how == "swap task_index":
        index = index[::-1]
    else:
        tasks[0] = tasks[0] + " slowly"
    pq.write_table(pa.table({"task_index": index, "task": tasks}), dataset / fmt.TASKS_PATH)
    with pytest.raises(DatasetError, match=r"tasks.parquet: the task table is not what the"):
        jaxload.open(dataset)
    assert "tasks table loads: " in _doctor_failure(dataset)


def test_a_task_table_rewritten_with_the_same_content_is_accepted(dataset):
    table = _tasks(dataset)
    reordered = table.take([1, 0])  # rows in another order, same task_index -> task
    pq.write_table(reordered, dataset / fmt.TASKS_PATH)
    assert jaxload.open(dataset)[0]["task"] == dict(zip(*table.to_pydict().values()))[0]


def _stats(path: Path) -> dict:
    return json.loads((path / fmt.STATS_PATH).read_text())


def _write_stats(path: Path, stats: dict, *, update_digest: bool) -> None:
    (path / fmt.STATS_PATH).write_text(json.dumps(stats))
    if update_digest:  # as if info.json were edited too: the checks of the values remain
        info = json.loads((path / fmt.INFO_PATH).read_text())
        info["stats_xxh3"][fmt.STATS_PATH] = sealing.json_digest(stats)
        (path / fmt.INFO_PATH).write_text(json.dumps(info))


def test_an_edited_mean_is_refused_by_load_stats_normalize_and_doctor(dataset):
    stats = _stats(dataset)
    stats["action"]["mean"] = [1000.0] * len(stats["action"]["mean"])
    _write_stats(dataset, stats, update_digest=False)
    with pytest.raises(DatasetError, match=r"stats.json: not the statistics this dataset"):
        load_stats(dataset)
    with pytest.raises(DatasetError, match="edited or replaced after conversion"):
        Normalize.from_datasets([dataset], {"action": "mean_std"})
    with pytest.raises(DatasetError, match="stats_xxh3"):
        _ = jaxload.open(dataset).stats
    assert "normalization stats are the converted ones: " in _doctor_failure(dataset)


def test_stats_edited_together_with_their_digest_are_caught_by_doctor(dataset):
    stats = _stats(dataset)
    stats["action"]["mean"] = [1000.0] * len(stats["action"]["mean"])
    _write_stats(dataset, stats, update_digest=True)
    assert load_stats(dataset)["action"].mean[0] == 1000.0  # finite, well-formed: loads
    assert "action is not what the records hold" in _doctor_failure(dataset)


@pytest.mark.parametrize(
    "stat, value, message",
    [
        ("std", float("nan"), r"action: std is not finite"),
        ("mean", float("inf"), r"action: mean is not finite"),
        ("std", -1.0, r"action: std is negative"),
        ("q99", float("nan"), r"action: q99 is not finite"),
    ],
)
def test_stats_that_would_put_nan_or_inf_into_batches_are_refused(dataset, stat, value, message):
    stats = _stats(dataset)
    stats["action"][stat] = [value] * len(stats["action"][stat])
    _write_stats(dataset, stats, update_digest=True)
    with pytest.raises(DatasetError, match=message):
        load_stats(dataset)
    with pytest.raises(DatasetError, match=message):
        Normalize.from_datasets([dataset], {"action": "mean_std"})
    assert message.replace("\\", "") in _doctor_failure(dataset)


def test_stats_of_another_shape_than_the_feature_are_refused(dataset):
    stats = _stats(dataset)
    stats["action"] = {k: v[:2] if k != "count" else v for k, v in stats["action"].items()}
    _write_stats(dataset, stats, update_digest=True)
    with pytest.raises(DatasetError, match=r"action: stats of shape \(2,\), but the feature"):
        load_stats(dataset)


def test_normalize_refuses_stats_given_by_hand_that_are_not_finite():
    entry = {"mean": [0.0, np.nan], "std": [1.0, 1.0], "min": [0, 0], "max": [1, 1], "count": [3]}
    with pytest.raises(DatasetError, match=r"Normalize: stats of 'action': mean is not finite"):
        Normalize({"action": entry}, {"action": "mean_std"})


def test_an_edited_sketch_is_refused(dataset):
    sketch = dataset / "meta/stats_sketch.npz"
    sketch.write_bytes(sketch.read_bytes() + b"\0")
    with pytest.raises(DatasetError, match=r"stats_sketch.npz: not the statistics"):
        load_stats(dataset)
    assert load_stats(dataset, sketch=False)["action"].count > 0


def test_format_5_is_refused_saying_to_reconvert(dataset):
    info = json.loads((dataset / fmt.INFO_PATH).read_text())
    info["format_version"] = 5
    (dataset / fmt.INFO_PATH).write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=r"format_version 5 was written by an older jaxload"):
        jaxload.open(dataset)
