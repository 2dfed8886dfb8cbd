"""A converted dataset opened (jaxload.dataset.JaxloadDataset, `jaxload.open`): episode
selection, windows, samples (strings, tasks, pads, cameras), the loader's read with frames
still encoded, pickling; LeRobot's dataset names (`num_frames`, `features`, `stats`,
`episode_data_index`, ...), slice/array indexing, `element_spec` as
`jax.ShapeDtypeStruct`s, `jaxload.stats` and `Normalize` touching only its keys.

A small factory dataset for the first; for the rest, compared with what LeRobot gives on
the shared fixtures: their meta/ files and the goldens of `LeRobotDataset` (`num_frames`,
`num_episodes`, items). `ds.meta` itself: tests/test_metadata.py.
"""

import json
import logging
import pickle
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest

import jaxload
import jaxload.stats as S
from jaxload.errors import DatasetError
from jaxload.transforms import Normalize
from tests.support.helpers import converted
from tests.support.lerobot_factory import string_value, write_lerobot_v3

SHARED = ("h264_single", "tabular_only")
TABULAR_DT = {"action": [k / 50 for k in range(32)], "observation.state": [-0.04, -0.02, 0.0]}


@pytest.fixture(scope="module")
def shared(shared_lerobot, tmp_path_factory):
    return {n: converted(tmp_path_factory, shared_lerobot / n) for n in SHARED}


CAM = "observation.images.top"
SMALL_LENGTHS = (3, 4, 2)


def small_dataset(tmp_path_factory) -> Path:
    """Three episodes, one 24x64 camera and a string feature (`language`), converted once
    per session (runs without the shared fixtures)."""
    out = tmp_path_factory.getbasetemp() / "converted" / "small"
    if not out.exists():
        src = write_lerobot_v3(
            tmp_path_factory.mktemp("small") / "src",
            episode_lengths=SMALL_LENGTHS,
            cameras={CAM: (24, 64)},
            string_features=("language",),
        )
        converted(tmp_path_factory, src, "small")
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return small_dataset(tmp_path_factory)


def _source_episodes(src: Path) -> list[dict]:
    columns = ["episode_index", "length", "dataset_from_index", "dataset_to_index", "tasks"]
    files = sorted((src / "meta" / "episodes").glob("*/*.parquet"))
    return pq.read_table(files, columns=columns).to_pylist()


def _golden(src: Path, name: str, suffix: str = "") -> dict:
    return json.loads((src.parent / "golden" / f"{name}{suffix}.json").read_text())


# --- a dataset opened: selection, windows, samples, the loader's read -------------------


def test_a_dataset_opens_with_its_episodes_and_names(small):
    ds = jaxload.open(small)
    assert (len(ds), ds.num_frames, ds.num_episodes) == (9, 9, 3)
    assert ds.name == str(small) and ds.camera_keys == [CAM]
    assert repr(ds) == f"JaxloadDataset({str(small)!r}, frames=9, episodes=3, cameras=['{CAM}'])"
    assert ds.episode_data_index["from"].tolist() == [0, 3, 7]
    assert ds.content_fingerprint == ds.meta.info["fingerprint"]


def test_an_episode_selection_serves_those_episodes_in_table_order(small):
    ds = jaxload.open(small, episodes=[2, 0, 2])
    assert ds.episode_index.tolist() == [0, 2] and ds.episode_lengths.tolist() == [3, 2]
    assert [int(s["episode_index"]) for s in ds[:]] == [0, 0, 0, 2, 2]
    assert [int(s["frame_index"]) for s in ds[:]] == [0, 1, 2, 0, 1]
    with pytest.raises(
        DatasetError,
        match=r"small: episodes \[5, 7\] not in this dataset \(it has episodes 0\.\.2\)",
    ):
        jaxload.open(small, episodes=[0, 5, 7])


def test_the_fingerprint_says_which_samples_a_view_serves(small):
    whole = jaxload.open(small)
    assert jaxload.open(small).fingerprint == whole.fingerprint
    some = jaxload.open(small, episodes=[0, 1])
    windowed = jaxload.open(small, delta_timestamps={"action": [0.0, 0.1]})
    assert len({whole.fingerprint, some.fingerprint, windowed.fingerprint}) == 3
    assert some.content_fingerprint == windowed.content_fingerprint == whole.content_fingerprint


def test_a_window_that_is_not_whole_frames_names_the_dataset_and_its_fps(small):
    with pytest.raises(jaxload.errors.WindowError, match=rf"^{small} \(10 fps\): .*action"):
        jaxload.open(small, delta_timestamps={"action": [0.0, 0.05]})


def test_samples_hold_values_strings_tasks_windows_and_pads(small):
    ds = jaxload.open(small, delta_timestamps={"action": [-0.1, 0.0, 0.1], CAM: [-0.1, 0.0]})
    sample = ds[3]  # episode 1, frame 0
    assert (int(sample["episode_index"]), int(sample["frame_index"])) == (1, 0)
    assert sample["language"] == string_value("language", 1, 0)
    assert sample["task"] == ds.tasks[int(sample["task_index"])]
    assert sample["action_is_pad"].tolist() == [True, False, False]  # before the episode
    np.testing.assert_array_equal(sample["action"][0], sample["action"][1])  # clamped
    assert sample[CAM].shape == (2, 24, 64, 3) and sample[CAM].dtype == np.uint8
    assert ds[6]["action_is_pad"].tolist() == [False, False, True]  # the episode's last frame
    assert jaxload.open(small)[0][CAM].shape == (24, 64, 3)  # no window: one frame
    spec = ds.element_spec()
    assert spec["language"].dtype == np.dtype(str) and "task" not in spec
    assert spec[CAM].shape == (2, 24, 64, 3) and spec["action"].shape == (3, 4)


def test_the_loaders_read_gives_the_samples_with_frames_still_encoded(small):
    ds = jaxload.open(small, delta_timestamps={CAM: [-0.1, 0.0]})
    positions = [8, 0, 4]
    samples, videos = ds.read(positions)
    assert list(videos) == [CAM] and all(CAM not in s for s in samples)
    frames = videos[CAM].decode()
    for b, sample in enumerate(ds[positions]):
        np.testing.assert_array_equal(frames[b], sample[CAM])
        np.testing.assert_array_equal(samples[b]["action"], sample["action"])
    plan = ds.plan_read(positions)
    keys = ds.record_keys(positions)
    assert keys.shape[1] == 2 and np.array_equal(plan.record_keys(), keys)
    planned, _ = ds.read_encoded(positions, plan=plan)
    assert [int(s["index"]) for s in planned] == [8, 0, 4]


def test_a_dataset_pickles_with_its_selection(small):
    ds = jaxload.open(small, episodes=[1], delta_timestamps={"action": [0.0, 0.1]})
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.fingerprint == ds.fingerprint and copy.episode_index.tolist() == [1]
    np.testing.assert_array_equal(copy[2]["action"], ds[2]["action"])


# --- ds.meta and LeRobot's direct names ----------------------------------------------


@pytest.mark.parametrize("name", SHARED)
def test_dataset_has_lerobot_dataset_names(shared, shared_lerobot, name):
    src = shared_lerobot / name
    golden = _golden(src, name)
    ds = jaxload.open(shared[name])
    assert (ds.fps, ds.num_frames, ds.num_episodes) == (
        golden["fps"],
        golden["num_frames"],
        golden["num_episodes"],
    )
    assert len(ds) == ds.num_frames
    assert ds.features == ds.meta.features and ds.tasks == ds.meta.tasks
    assert ds.camera_keys == ds.meta.camera_keys
    episodes = _source_episodes(src)
    index = ds.episode_data_index
    assert index["from"].tolist() == [e["dataset_from_index"] for e in episodes]
    assert index["to"].tolist() == [e["dataset_to_index"] for e in episodes]


def test_an_episode_selection_counts_like_lerobot(shared, shared_lerobot):
    """LeRobotDataset(episodes=[1, 3]): num_frames/num_episodes count the selection, its
    meta (and stats) describe the whole dataset."""
    episodes = _source_episodes(shared_lerobot / "h264_single")
    lengths = [episodes[1]["length"], episodes[3]["length"]]
    ds = jaxload.open(shared["h264_single"], episodes=[3, 1])
    assert (ds.num_frames, ds.num_episodes) == (sum(lengths), 2)
    assert ds.meta.total_frames == sum(e["length"] for e in episodes)
    assert ds.meta.total_episodes == len(episodes)
    assert ds.stats["action"]["count"].tolist() == [ds.meta.total_frames]
    bounds = ds.episode_data_index
    assert bounds["from"].tolist() == [0, lengths[0]]
    assert bounds["to"].tolist() == [lengths[0], sum(lengths)]
    for k, episode in enumerate((1, 3)):
        frames = ds[int(bounds["from"][k]) : int(bounds["to"][k])]
        assert [int(f["episode_index"]) for f in frames] == [episode] * lengths[k]
        assert [int(f["frame_index"]) for f in frames] == list(range(lengths[k]))
        first = episodes[episode]["dataset_from_index"]
        assert int(frames[0]["index"]) == first  # the source's global index


# --- indexing ---------------------------------------------------------------------------


def test_slices_and_index_arrays_return_lists_of_samples(shared, shared_lerobot):
    ds = jaxload.open(shared["tabular_only"], delta_timestamps=TABULAR_DT)
    golden = _golden(shared_lerobot / "tabular_only", "tabular_only")
    arrays = np.load(shared_lerobot / "golden" / "tabular_only.npz")
    indices = [int(i) for i in golden["indices"]][:6]

    cases = {
        "slice": (ds[0:2], [0, 1]),
        "list": (ds[[3, 5]], [3, 5]),
        "array": (ds[np.array(indices)], indices),
        "range": (ds[range(7, 10)], [7, 8, 9]),
        "step": (ds[100:110:4], [100, 104, 108]),
        "negative slice": (ds[-2:], [len(ds) - 2, len(ds) - 1]),
        "negative in array": (ds[np.array([-1, 0])], [len(ds) - 1, 0]),
    }
    for what, (samples, positions) in cases.items():
        assert isinstance(samples, list), what
        assert [int(s["index"]) for s in samples] == positions, what
    assert ds[5:5] == [] and ds[[]] == []

    # each item equals LeRobot's item at that index
    for i, sample in zip(indices, ds[np.array(indices)]):
        for key in ("action", "observation.state", "action_is_pad", "observation.state_is_pad"):
            np.testing.assert_array_equal(sample[key], arrays[f"{i}/{key}"], err_msg=f"{i} {key}")
        assert sample["task"] == golden["items"][str(i)]["task"]

    one = ds[3]  # an int keeps giving one sample
    assert isinstance(one, dict) and int(one["index"]) == 3
    assert int(ds[np.int32(4)]["index"]) == 4 and int(ds[np.array(6)]["index"]) == 6
    assert int(ds[-1]["index"]) == len(ds) - 1  # negative ints count from the end


def test_slices_of_a_video_dataset_equal_single_reads(shared):
    ds = jaxload.open(shared["h264_single"], delta_timestamps={"observation.image": [-0.1, 0.0]})
    for position, sample in zip([20, 21, 22, 23], ds[20:24]):
        single = ds[position]
        assert set(sample) == set(single)
        for key, value in single.items():
            np.testing.assert_array_equal(sample[key], value, err_msg=key)


@pytest.mark.parametrize(
    "index, message",
    [
        (
            (3, 5),
            r"ds\[3, 5\]: a dataset has one axis; for several samples pass a list: "
            r"ds\[\[3, 5\]\]",
        ),
        (1.5, "takes an int, a slice or a 1-D sequence/array of ints, not float"),
        ("3", "not str"),
        (None, "not NoneType"),
        ({1, 2}, "not set"),
        (True, r"ds\[True\]: a bool is not a position"),
        ([1.0, 2.0], "index values must be integers, got dtype float64"),
        (np.zeros((2, 2), int), r"an index array must be 1-D, got shape \(2, 2\)"),
        (np.array([True, False]), r"boolean masks are not supported; use ds\[np.flatnonzero"),
    ],
)
def test_bad_index_types_are_type_errors_naming_the_dataset(shared, index, message):
    path = shared["tabular_only"]
    with pytest.raises(TypeError, match=message) as raised:
        jaxload.open(path)[index]
    assert str(path) in str(raised.value)


def test_out_of_range_positions_are_index_errors(shared):
    ds = jaxload.open(shared["tabular_only"])
    n = len(ds)
    for index in (n, -n - 1, [0, n], slice(None)):
        if isinstance(index, slice):
            assert len(ds[n - 3 : n + 10]) == 3  # slices clip, as in Python
            continue
        with pytest.raises(IndexError, match=f"out of range for a dataset of {n} frames"):
            ds[index]
    with pytest.raises(TypeError, match="positions must be integers"):
        ds.__getitems__([0.5])


# --- element_spec -----------------------------------------------------------------------


def test_element_spec_is_shape_dtype_structs_matching_samples_and_batches(shared):
    windows = {"action": [0.0, 0.1, 0.2], "observation.image": [-0.1, 0.0]}
    ds = jaxload.open(shared["h264_single"], delta_timestamps=windows)
    spec, sample = ds.element_spec(), ds[10]
    assert set(spec) == set(sample) - {"task"}
    for key, struct in spec.items():
        assert isinstance(struct, jax.ShapeDtypeStruct), key
        value = np.asarray(sample[key])
        assert (value.shape, value.dtype) == (struct.shape, struct.dtype), key
    assert spec["observation.image"].shape == (2, 84, 84, 3)

    loader = jaxload.make_loader(
        ds,
        global_batch_size=4,
        options=jaxload.PipelineOptions(num_workers=0),
        host_index=0,
        host_count=1,
        shuffle=False,
    )
    with loader:
        batch = next(loader)
        for key, struct in loader.element_spec.items():
            assert isinstance(struct, jax.ShapeDtypeStruct), key
            assert (batch[key].shape, batch[key].dtype) == (struct.shape, struct.dtype), key


# --- jaxload.stats and Normalize ------------------------------------------------------------


@pytest.mark.processes
def test_jaxload_stats_is_reachable_as_documented():
    code = (
        "import jaxload\n"
        "assert 'stats' in dir(jaxload) and 'stats' in jaxload.__all__\n"
        "assert callable(jaxload.stats.load_stats) and callable(jaxload.stats.merge_stats)\n"
        "from jaxload import stats\n"
        "assert stats is jaxload.stats\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_normalize_reads_merges_and_warns_only_about_its_keys(shared, caplog):
    path = shared["h264_single"]
    # A mixture whose image stats have no quantile sketch: merging everything warns...
    with caplog.at_level(logging.WARNING, logger="jaxload.stats"):
        S.merge_stats([S.load_stats(path), S.load_stats(path)])
    assert "'observation.image'" in caplog.text
    caplog.clear()
    # ...Normalize over state and action alone reads, merges and warns about nothing else.
    modes = {"observation.state": "mean_std", "action": "quantile"}
    with caplog.at_level(logging.WARNING, logger="jaxload"):
        norm = Normalize.from_datasets([path, path], modes)
    assert caplog.text == ""
    sample = jaxload.open(path)[9]
    out = norm(sample)
    for key, value in sample.items():
        if key not in modes:
            assert out[key] is value, key  # untouched
    assert out["action"].dtype == np.float32 and not np.array_equal(out["action"], sample["action"])

    assert set(S.load_stats(path, ["action", "nope"])) == {"action"}
    with pytest.raises(KeyError, match=r"no stats for \['nope'\] in .*h264_single.*have \["):
        Normalize.from_datasets([path, path], {"action": "mean_std", "nope": "mean_std"})
