"""benchmarks/bench_scale.py and its datasets (benchmarks/scale_data.py) at tiny size, so
they cannot rot: the column-wise LeRobot source converts and reads back what it wrote, the
DROID-shaped dataset opens, reads its written shard and serves a loader's first batch, and
the benchmark's measuring script runs on it."""

import numpy as np
import pytest

import jaxload
from benchmarks import bench_scale, scale_data
from benchmarks.ab import run_in_tree
from jaxload.converters.convert import convert
from jaxload.converters.lerobot_v3 import LeRobotV3Source

pytestmark = pytest.mark.integration

LENGTHS = np.array([4, 8, 6, 2, 10, 4, 6, 8, 2, 4, 6, 12])


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("template")
    src = scale_data.write_template_source(root / "src")
    # Fixed GOPs (a re-encode): scale_data tiles the template's first GOP record.
    convert(src, root / "out", video_codec="h264", workers=1, progress=False)
    return root / "out"


def test_the_column_wise_source_converts_to_what_it_wrote(tmp_path):
    cameras = {"observation.images.cam0": (32, 32)}
    src = scale_data.write_lerobot_source(
        tmp_path / "src", lengths=LENGTHS, episodes_per_file=5, cameras=cameras, tasks=3
    )
    source = LeRobotV3Source(src)
    assert [source.episode(e).length for e in source.episode_ids] == LENGTHS.tolist()
    assert source.video_keys == list(cameras)
    convert(src, tmp_path / "out", workers=1, progress=False)
    ds = jaxload.open(tmp_path / "out")
    assert len(ds) == LENGTHS.sum()
    starts = np.cumsum(LENGTHS) - LENGTHS
    for episode in (0, 4, 11):
        frame = 1
        item = ds[int(starts[episode]) + frame]
        assert (item["episode_index"], item["frame_index"]) == (episode, frame)
        expected = scale_data._signal(np.array([episode]), np.array([frame]), 8)[0]
        np.testing.assert_array_equal(item["observation.state"], expected)
        assert item["task"].startswith(f"task {episode % 3}:")
        assert item["observation.images.cam0"].shape == (32, 32, 3)


def test_the_droid_shaped_dataset_opens_and_reads_its_first_shard(template, tmp_path):
    lengths = np.r_[np.full(60, 9), 5]  # 61 episodes: shard 0 written, shard 1 not
    root = scale_data.write_droid_shaped(tmp_path / "droid", template, lengths=lengths, tasks=7)
    ds = jaxload.open(root)
    assert len(ds) == lengths.sum() and ds.meta.total_episodes == len(lengths)
    assert ds.meta.total_tasks == 7
    last_written = scale_data.EPISODES_PER_SHARD * 9 - 1
    item = ds[last_written]
    assert (item["episode_index"], item["frame_index"]) == (scale_data.EPISODES_PER_SHARD - 1, 8)
    for cam in scale_data.DROID_CAMERAS:
        assert item[cam].shape == (36, 64, 3)
    assert item["task"].startswith("droid task ")
    loader = jaxload.make_loader(
        root,
        global_batch_size=4,
        shuffle=False,
        delta_timestamps={"action": [k / scale_data.DROID_FPS for k in range(3)]},
        host_index=0,
        host_count=1,
    )
    batch = next(loader)
    assert batch["action"].shape == (4, 3, 7)
    assert batch["index"].tolist() == [0, 1, 2, 3]
    loader.close()


@pytest.mark.processes
def test_the_open_measurement_runs(template, tmp_path):
    root = scale_data.write_droid_shaped(tmp_path / "droid", template, lengths=np.full(8, 9))
    config = dict(path=str(root), open=True, shuffle=False, fps=scale_data.DROID_FPS,
                  workers=None, batch_size=4, batches=2)  # fmt: skip
    got = run_in_tree(bench_scale.MEASURE_OPEN, bench_scale.REPO_ROOT, config, timeout=600)
    assert got["open_s"] > 0 and got["first_batch_s"] > 0 and got["worker_rss"] == []
    assert 0 < got["pickle_bytes"] < 1e6 and got["rss"] <= got["peak_rss"]


@pytest.mark.processes
def test_every_shard_written_and_the_plateau_measurement_runs(template, tmp_path):
    lengths = np.r_[np.full(100, 4), 6]  # 101 episodes: shards 0, 1 and 2, all written
    root = scale_data.write_droid_shaped(
        tmp_path / "droid", template, lengths=lengths, tasks=5, all_shards=True, workers=2
    )
    assert len(list((root / "data").glob("*.array_record"))) == 3
    ds = jaxload.open(root)
    item = ds[len(ds) - 1]
    assert (item["episode_index"], item["frame_index"]) == (100, 5)
    config = dict(path=str(root), open_first=False, workers=2, fps=scale_data.DROID_FPS,
                  batch_size=8, batches=6, every=3, episodes_per_shard=scale_data.EPISODES_PER_SHARD)  # fmt: skip
    got = run_in_tree(bench_scale.MEASURE_PLATEAU, bench_scale.REPO_ROOT, config, timeout=600)
    assert got["make_loader_cpu_s"] > 0 and got["first_batch_s"] > 0
    assert [s["batch"] for s in got["samples"]] == [3, 6]
    plateau = got["samples"][-1]
    assert plateau["shards_touched"] >= 2 and len(plateau["workers"]) == 2
    for process in [plateau["trainer"], *plateau["workers"]]:
        assert 0 < process["pss"] <= process["rss"] and process["files"] > 3
