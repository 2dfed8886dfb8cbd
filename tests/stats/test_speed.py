"""Per-task speed buckets (jaxload.stats.speed): labels, persistence, warnings, concurrency."""

import json
import logging
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import jaxload
import jaxload.format.storage
from jaxload import format as fmt
from jaxload.converters.convert import convert
from jaxload.errors import DatasetError
from jaxload.stats import speed
from tests.support.lerobot_factory import write_lerobot_v3

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _episodes(root: Path, lengths, tasks) -> Path:
    """A dataset's metadata without shards: meta/info.json and meta/episodes.parquet (what
    speed buckets read, through jaxload.format.reader), a tabular-only layout."""
    tasks = [[t] if isinstance(t, str) else list(t) for t in tasks]
    (root / "meta").mkdir(parents=True, exist_ok=True)
    info = fmt.DatasetInfo(
        fps=10,
        total_frames=int(sum(lengths)),
        total_episodes=len(lengths),
        features={"index": fmt.Feature("int64", ())},
        cameras={},
        num_shards=1,
        fingerprint="",
        source={},
        converter={},
        record_seed=0,  # no shard is read here
    )
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    blocks = np.concatenate([[0], np.cumsum([fmt.num_blocks(n) for n in lengths])[:-1]])
    rows = [
        {
            "episode_index": e,
            "length": n,
            "dataset_from_index": start,
            "tasks": t,
            "shard": 0,
            "frames_record_start": int(block),
        }
        for e, (n, t, start, block) in enumerate(zip(lengths, tasks, starts, blocks))
    ]
    pq.write_table(fmt.episodes_table(rows, []), root / fmt.EPISODES_PATH)
    info = fmt.with_metadata_digests(info, rows)  # what records would be keyed by (format 5)
    (root / fmt.INFO_PATH).write_text(json.dumps(info.to_json()))
    return root


@pytest.fixture(autouse=True)
def _fresh_warnings():
    speed._warned.clear()  # one warning per process: each test starts with none given


def test_boundary_walk(tmp_path):
    # 201 lengths 10..210: p5 = 20, p15 = 40, ..., p95 = 200 exactly.
    lengths = list(range(10, 211))
    root = _episodes(tmp_path, lengths, ["pick"] * len(lengths))
    labels = dict(zip(lengths, speed.speed_labels(root, process_index=0).tolist()))
    boundaries = speed.load_buckets(root, process_index=0).tasks["pick"].boundaries
    np.testing.assert_allclose(boundaries, range(20, 201, 20), rtol=1e-12)
    assert labels[10] == labels[19] == 0  # < p5
    assert labels[20] == 10  # a length equal to a boundary lands in the upper bucket
    assert labels[39] == 10 and labels[40] == 20
    assert labels[199] == 90 and labels[200] == 100 and labels[210] == 100  # >= p95
    counts = np.bincount(np.array(list(labels.values())) // 10, minlength=11)
    assert counts.tolist() == [10, *([20] * 9), 11]


def test_tasks_with_fewer_than_ten_distinct_lengths_get_50(tmp_path):
    sparse = [30, 31, 32, 33, 34, 35, 36, 37, 38] * 5  # 45 episodes, 9 distinct lengths
    dense = list(range(100, 110))  # exactly 10 distinct
    root = _episodes(tmp_path, sparse + dense, ["sparse"] * 45 + ["dense"] * 10)
    labels = speed.speed_labels(root, process_index=0)
    assert (labels[:45] == 50).all()
    assert labels[45:].tolist() == [0, 10, 20, 30, 40, 60, 70, 80, 90, 100]
    stored = json.loads((root / speed.SPEED_PATH).read_text())["tasks"]
    assert stored["sparse"] == {"num_episodes": 45, "distinct_lengths": 9, "boundaries": None}


def test_multi_task_episodes_count_for_their_first_task(tmp_path):
    lengths = [*range(10, 30), 500]
    tasks = [["a"]] * 20 + [["b", "a"]]  # the long episode is task "b" first
    root = _episodes(tmp_path, lengths, tasks)
    buckets = speed.load_buckets(root, process_index=0)
    assert buckets.tasks["a"].num_episodes == 20 and buckets.tasks["b"].num_episodes == 1
    labels = speed.speed_labels(root, process_index=0)
    assert labels[-1] == 50  # alone in task b, not the longest of task a
    assert labels[19] == 100  # length 29 is still task a's longest


def test_round_trip_persistence_on_a_converted_dataset(tmp_path):
    lengths = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 2, 2]
    tasks = ["fold"] * 12 + ["wipe"] * 2
    src = write_lerobot_v3(
        tmp_path / "src", fps=10, episode_lengths=lengths, episode_tasks=tasks, cameras={}
    )
    root = tmp_path / "ds"
    convert(src, root, workers=1, progress=False)
    assert not (root / speed.SPEED_PATH).exists()

    ds = jaxload.open(root, episodes=[11, 0, 12])
    labels = speed.speed_labels(ds, process_index=0)  # the dataset's selected episodes
    assert labels.tolist() == [0, 100, 50]  # ds.episode_index is sorted: 0, 11, 12
    raw = json.loads((root / speed.SPEED_PATH).read_text())
    assert raw["schema_version"] == speed.SCHEMA_VERSION and raw["num_episodes"] == 14
    assert raw["percentiles"] == list(range(5, 100, 10))
    assert speed.SpeedBuckets.from_json(raw, "x") == speed.load_buckets(root, process_index=0)

    # The stored file is what is used: shift its boundaries and the labels follow.
    raw["tasks"]["fold"]["boundaries"] = [100.0] * 10
    (root / speed.SPEED_PATH).write_text(json.dumps(raw))
    assert (speed.speed_labels(root, process_index=0)[:12] == 0).all()


def test_stale_episode_count_warns_once_from_process_0_and_keeps_the_file(tmp_path, caplog):
    root = _episodes(tmp_path, list(range(10, 30)), ["a"] * 20)
    speed.speed_labels(root, process_index=0)
    before = (root / speed.SPEED_PATH).read_bytes()
    _episodes(tmp_path, [*range(10, 30), 1000], ["a"] * 21)  # the dataset grew
    with caplog.at_level(logging.WARNING, logger="jaxload.stats.speed"):
        speed.speed_labels(root, process_index=1)  # not process 0: silent
        assert not caplog.records
        for _ in range(3):
            labels = speed.speed_labels(root, process_index=0)
    stale = [r for r in caplog.records if "computed from 20 episodes" in r.getMessage()]
    assert len(stale) == 1 and len(caplog.records) == 1
    assert (root / speed.SPEED_PATH).read_bytes() == before  # still used until deleted
    assert labels[-1] == 100  # labelled with the stored boundaries
    (root / speed.SPEED_PATH).unlink()
    speed.speed_labels(root, process_index=0)
    assert json.loads((root / speed.SPEED_PATH).read_text())["num_episodes"] == 21


def test_read_only_dataset_falls_back_to_memory_with_one_warning(tmp_path, caplog, monkeypatch):
    root = _episodes(tmp_path, list(range(10, 30)), ["a"] * 20)
    meta = root / "meta"
    meta.chmod(0o555)
    try:
        if os.access(meta, os.W_OK):  # root ignores permissions: fail the write like EROFS

            def read_only(path, data):
                raise OSError(30, "Read-only file system", str(path))

            monkeypatch.setattr(jaxload.format.storage, "write_bytes_atomic", read_only)
        with caplog.at_level(logging.WARNING, logger="jaxload.stats.speed"):
            first = speed.speed_labels(root, process_index=0)
            second = speed.speed_labels(root, process_index=0)
    finally:
        meta.chmod(0o755)
    assert first.tolist() == second.tolist() and first[0] == 0 and first[-1] == 100
    assert not (root / speed.SPEED_PATH).exists()
    assert sorted(p.name for p in meta.iterdir()) == ["episodes.parquet", "info.json"]  # no temp
    assert len(caplog.records) == 1 and "kept in memory" in caplog.text


def test_only_process_0_writes(tmp_path):
    root = _episodes(tmp_path, list(range(10, 30)), ["a"] * 20)
    labels = speed.speed_labels(root, process_index=3)
    assert not (root / speed.SPEED_PATH).exists()
    assert labels.tolist() == speed.speed_labels(root, process_index=0).tolist()
    assert (root / speed.SPEED_PATH).exists()


def test_other_schema_versions_and_broken_files(tmp_path, caplog):
    root = _episodes(tmp_path, list(range(10, 30)), ["a"] * 20)
    path = root / speed.SPEED_PATH
    path.write_text(json.dumps({"schema_version": 99, "whatever": True}))
    with caplog.at_level(logging.WARNING, logger="jaxload.stats.speed"):
        labels = speed.speed_labels(root, process_index=0)
    assert labels[0] == 0 and "schema_version 99" in caplog.text
    assert json.loads(path.read_text())["schema_version"] == 99  # left alone
    path.write_text("{not json")
    with pytest.raises(DatasetError, match=r"speed_buckets\.json: unreadable.*delete it"):
        speed.speed_labels(root, process_index=0)
    path.write_text(json.dumps({"schema_version": 1, "num_episodes": 20, "tasks": {"a": {}}}))
    with pytest.raises(DatasetError, match="malformed speed buckets"):
        speed.speed_labels(root, process_index=0)
    with pytest.raises(DatasetError, match=r"episodes \[77\] not in this dataset"):
        speed.speed_labels(root, [0, 77], process_index=0)


# Runs in each writer process. It imports jaxload.stats.speed without jaxload/__init__ (which
# loads torch for the reader): eight interpreters importing torch at once would take most
# of a minute on two cores, and speed.py does not need it.
_WRITER = """
import sys, types
package = types.ModuleType("jaxload")
package.__path__ = [repo + "/jaxload"]
sys.modules.setdefault("jaxload", package)
from jaxload.stats import speed
for _ in range(rounds):
    barrier.wait()  # every writer starts the round together, the file absent
    results.put(speed.speed_labels(root, process_index=0).tolist())
    barrier.wait()
"""


@pytest.mark.processes
def test_eight_concurrent_writer_processes_leave_one_valid_file(tmp_path):
    lengths = [int(v) for v in np.random.default_rng(0).integers(10, 3000, size=400)]
    tasks = [f"task {i % 3}" for i in range(400)]
    root = _episodes(tmp_path, lengths, tasks)
    expected = speed.compute_buckets(lengths, tasks).labels(lengths, tasks).tolist()
    ctx = multiprocessing.get_context("spawn")
    writers, rounds = 8, 3
    barrier, results = ctx.Barrier(writers + 1), ctx.Queue()
    scope = {"repo": str(REPO), "root": str(root), "rounds": rounds}
    procs = [
        ctx.Process(target=exec, args=(_WRITER, {**scope, "barrier": barrier, "results": results}))
        for _ in range(writers)
    ]
    for p in procs:
        p.start()
    try:
        for _ in range(rounds):
            (root / speed.SPEED_PATH).unlink(missing_ok=True)
            barrier.wait(timeout=120)
            barrier.wait(timeout=120)
            raw = json.loads((root / speed.SPEED_PATH).read_text())  # valid, complete JSON
            assert speed.SpeedBuckets.from_json(raw, "x") == speed.compute_buckets(lengths, tasks)
            assert sorted(p.name for p in (root / "meta").iterdir()) == [
                "episodes.parquet",
                "info.json",
                "speed_buckets.json",
            ]  # no temp files left behind
        labels = [results.get(timeout=60) for _ in range(writers * rounds)]
    except BaseException:
        barrier.abort()  # a failed check must not leave writers waiting for the parent
        raise
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    assert all(got == expected for got in labels)
