"""LeRobot's metadata names on a converted dataset (jaxload.metadata): `DatasetMetadata`
(`ds.meta`), its `EpisodeTable`, features in LeRobot's form, stats loaded lazily.
Compared with what LeRobot wrote for the shared fixtures (tests/test_dataset.py has their
conversions), and checked on a small factory dataset with a camera and a string feature."""

import json
import pickle
import shutil

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest

import jaxload
import jaxload.stats as S
from jaxload.errors import DatasetError
from jaxload.format.storage import LocalDirectory
from jaxload.metadata import DatasetMetadata, lerobot_features, shape_dtype_structs
from jaxload.transforms import Normalize
from tests.support.helpers import converted
from tests.test_dataset import SHARED, _golden, _source_episodes, small_dataset

CAM = "observation.images.top"


@pytest.fixture(scope="module")
def shared(shared_lerobot, tmp_path_factory):
    return {n: converted(tmp_path_factory, shared_lerobot / n) for n in SHARED}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Three episodes, one 24x64 camera and a string feature, converted."""
    return small_dataset(tmp_path_factory)


def test_metadata_loads_from_a_path_or_a_storage_under_lerobots_names(small):
    meta = DatasetMetadata.load(small)
    assert (meta.fps, meta.total_frames, meta.total_episodes) == (10, 9, 3)
    assert meta.total_tasks == len(meta.tasks) == 2 and meta.robot_type == "synthetic_arm"
    assert meta.camera_keys == meta.video_keys == [CAM] and meta.image_keys == []
    assert meta.shapes[CAM] == (24, 64, 3) and meta.shapes["episode_index"] == (1,)
    assert meta.names == {k: f["names"] for k, f in meta.features.items()}
    assert meta.info["fps"] == 10 and meta.info["total_frames"] == 9
    other = DatasetMetadata.load(LocalDirectory(small))
    assert other.features == meta.features and list(other.episodes) == list(meta.episodes)
    assert repr(meta) == (
        f"DatasetMetadata({str(small)!r}, fps=10, frames=9, episodes=3, tasks=2, cameras=['{CAM}'])"
    )


def test_features_are_lerobots_cameras_first_as_video_scalars_of_shape_one(small):
    info = jaxload.format.read_info(small)
    features = lerobot_features(info)
    assert next(iter(features)) == CAM
    assert features[CAM]["dtype"] == "video" and features[CAM]["shape"] == (24, 64, 3)
    assert features[CAM]["info"] | {"video.codec": None} == {
        "video.height": 24, "video.width": 64, "video.codec": None,
        "video.pix_fmt": "yuv420p", "video.fps": 10, "video.channels": 3,
    }  # fmt: skip
    assert features["language"]["dtype"] == "string"
    assert features["frame_index"]["shape"] == (1,)  # a scalar column
    assert features["action"]["shape"] == (4,)
    features["action"]["names"].append("mine")  # a copy: the info's names stay
    assert lerobot_features(info)["action"]["names"] == info.features["action"].names


def test_the_episode_table_reads_rows_columns_and_refuses_the_rest(small):
    table = DatasetMetadata.load(small).episodes
    assert len(table) == 3 and repr(table) == "EpisodeTable(3 episodes: 0..2)"
    assert table[1] == {
        "episode_index": 1, "length": 4, "dataset_from_index": 3, "dataset_to_index": 7,
        "tasks": table["tasks"][1],
    }  # fmt: skip
    assert table[np.int64(2)]["dataset_to_index"] == 9
    assert table["dataset_from_index"].tolist() == [0, 3, 7]
    with pytest.raises(ValueError, match="read-only"):
        table["dataset_to_index"][0] = 1
    with pytest.raises(TypeError, match="not bool"):
        table[True]
    with pytest.raises(IndexError, match=r"no episode -1 \(episodes: 0\.\.2\)"):
        table[-1]


def test_shape_dtype_structs_are_jax_structs():
    structs = shape_dtype_structs({"a": ([2, 3], "float32"), "b": ((), np.int64)})
    assert structs["a"] == jax.ShapeDtypeStruct((2, 3), np.float32)
    assert structs["b"].shape == () and structs["b"].dtype == np.int64


# --- compared with LeRobot ----------------------------------------------------------------


@pytest.mark.parametrize("name", SHARED)
def test_meta_matches_lerobots_metadata(shared, shared_lerobot, name):
    src = shared_lerobot / name
    info = json.loads((src / "meta" / "info.json").read_text())
    golden = _golden(src, name)
    meta = jaxload.open(shared[name]).meta

    assert (meta.fps, meta.total_frames, meta.total_episodes, meta.total_tasks) == (
        info["fps"],
        info["total_frames"],
        info["total_episodes"],
        info["total_tasks"],
    )
    assert (golden["fps"], golden["num_frames"]) == (meta.fps, meta.total_frames)
    assert meta.camera_keys == meta.video_keys == sorted(golden["image_keys"])
    assert meta.robot_type == info["robot_type"]

    # features: LeRobot's info.json entries (shapes as tuples, as LeRobot loads them).
    assert set(meta.features) == set(info["features"])
    for key, theirs in info["features"].items():
        ours = meta.features[key]
        assert ours["dtype"] == theirs["dtype"], key
        assert ours["shape"] == tuple(theirs["shape"]), key
        assert ours["names"] == theirs["names"], key
    assert meta.shapes == {k: tuple(f["shape"]) for k, f in info["features"].items()}

    # tasks: task_index -> task, as in meta/tasks.parquet (indexed by the task string).
    tasks = pq.read_table(src / "meta" / "tasks.parquet").to_pandas()
    assert meta.tasks == {int(i): t for t, i in zip(tasks.index, tasks["task_index"])}

    # episodes: LeRobot's boundary columns, row by row and as columns.
    expected = _source_episodes(src)
    assert list(meta.episodes) == expected and len(meta.episodes) == len(expected)
    assert meta.episodes[3] == expected[3]
    ends = [e["dataset_to_index"] for e in expected]
    assert meta.episodes["dataset_to_index"].tolist() == ends

    assert meta.info["fps"] == info["fps"] and meta.info["format"] == "jaxload"
    loaded = DatasetMetadata.load(shared[name])
    assert list(loaded.episodes) == expected and loaded.features == meta.features


def test_stats_are_the_stored_stats_in_lerobots_form(shared, shared_lerobot):
    path, src = shared["h264_single"], shared_lerobot / "h264_single"
    lerobot = json.loads((src / "meta" / "stats.json").read_text())
    stored = S.load_stats(path)
    stats = jaxload.open(path).stats
    assert set(stats) == set(lerobot) == set(stored)
    for key, entry in stats.items():
        assert list(entry) == list(lerobot[key]), key  # LeRobot's stats and key order
        for name, value in entry.items():
            assert isinstance(value, np.ndarray), (key, name)
            np.testing.assert_array_equal(value, stored[key].get(name))
            assert value.shape == np.asarray(lerobot[key][name]).shape, (key, name)
        scale = np.maximum(np.abs(entry["mean"]), entry["std"])
        np.testing.assert_allclose(entry["mean"], lerobot[key]["mean"], atol=1e-5 * scale.max())
        np.testing.assert_allclose(entry["std"], lerobot[key]["std"], rtol=1e-5, atol=1e-9)
    # image stats are LeRobot's, copied
    for name, value in stats["observation.image"].items():
        np.testing.assert_array_equal(value, lerobot["observation.image"][name])
    # LeRobot's dict form feeds Normalize directly
    sample = jaxload.open(path)[7]
    direct = Normalize(stats, {"action": "mean_std"})(sample)["action"]
    from_path = Normalize.from_datasets(path, {"action": "mean_std"})(sample)["action"]
    np.testing.assert_allclose(direct, from_path, rtol=1e-6)


def test_metadata_is_read_only_and_stats_load_lazily(shared, tmp_path):
    ds = jaxload.open(shared["h264_single"])
    stats = ds.stats
    stats["action"]["mean"][:] = 1e9
    del stats["observation.state"]
    assert "observation.state" in ds.stats and (ds.stats["action"]["mean"] < 1e9).all()
    features = ds.features
    features["action"]["shape"] = (99,)
    assert ds.features["action"]["shape"] == (4,)
    with pytest.raises(ValueError, match="read-only"):
        ds.meta.episodes["length"][0] = 5
    assert ds.episode_lengths[0] == ds.meta.episodes["length"][0]  # the dataset's own stays
    # pickles (Grain workers) with its metadata
    assert pickle.loads(pickle.dumps(ds)).meta.total_frames == ds.meta.total_frames

    # open() does not read stats.json: a dataset without one opens and reads; `stats`
    # names the missing file when asked.
    copy = tmp_path / "no_stats"
    shutil.copytree(shared["h264_single"], copy)
    (copy / "meta" / "stats.json").unlink()
    bare = jaxload.open(copy)
    assert bare.meta.fps == 10 and int(bare[3]["index"]) == 3
    with pytest.raises(DatasetError, match=r"no_stats/meta/stats.json: missing"):
        _ = bare.stats


def test_episode_table_lookup_errors(shared):
    meta = jaxload.open(shared["h264_single"]).meta
    with pytest.raises(IndexError, match=r"no episode 6 \(episodes: 0..5\)"):
        meta.episodes[6]
    with pytest.raises(KeyError, match="no column 'frames'"):
        meta.episodes["frames"]
    with pytest.raises(TypeError, match="column name or an episode_index"):
        meta.episodes[1.0]
