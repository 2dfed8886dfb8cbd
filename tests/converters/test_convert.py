"""Conversion and reading of LeRobot datasets the tests write themselves.

These cover layouts the shared fixtures don't: episodes of 1 and 2 frames, cameras that
split their mp4s at different episodes (so episodes start at nonzero from_timestamp),
several data files, multi-task episodes, extra scalar columns.
"""

import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import jaxload
from jaxload.converters.convert import convert, parse_episodes
from jaxload.errors import JaxloadError
from tests.support.helpers import leftovers, tree_bytes
from tests.support.lerobot_factory import decode_frame_leds, frame_state, write_lerobot_v3

pytestmark = pytest.mark.integration

LENGTHS = (5, 1, 2, 17, 9, 3)
CAMERAS = {"observation.images.top": (48, 64), "observation.images.wrist": (40, 72)}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_lerobot_v3(
        tmp_path_factory.mktemp("src") / "multi",
        fps=10,
        episode_lengths=LENGTHS,
        episode_tasks=["fold", "stack", ["fold", "stack"], "wipe", "stack", "fold"],
        cameras=CAMERAS,
        video_codec="av1",
        episodes_per_data_file=2,
        episodes_per_video_file={"observation.images.top": 3, "observation.images.wrist": 2},
        extra_features={"next.done": "bool", "next.reward": "float32"},
    )


@pytest.fixture(scope="module")
def converted(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "ds"
    convert(source, out, workers=2, gop=4, progress=False)
    return out


@pytest.mark.processes
def test_every_frame_is_the_right_frame(converted):
    ds = jaxload.open(converted)
    assert len(ds) == sum(LENGTHS)
    starts = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])
    for i, sample in enumerate(ds.__getitems__(range(len(ds)))):
        ep = int(np.searchsorted(starts, i, side="right") - 1)
        t = i - starts[ep]
        assert (sample["index"], sample["episode_index"], sample["frame_index"]) == (i, ep, t)
        assert sample["observation.state"][0] == np.float32(frame_state(ep, t))
        assert sample["next.done"].dtype == np.bool_ and sample["next.done"].shape == ()
        for cam, (h, w) in CAMERAS.items():
            assert sample[cam].shape == (h, w, 3) and sample[cam].dtype == np.uint8
            assert decode_frame_leds(sample[cam]) == t, (i, cam)


@pytest.mark.processes
def test_windows_clamp_inside_episodes_for_video_and_tabular(converted):
    dt = {
        "observation.images.top": [-0.2, 0.0, 0.1],
        "observation.images.wrist": [0.0],
        "action": [-0.1, 0.0, 0.1, 0.2],
    }
    ds = jaxload.open(converted, delta_timestamps=dt)
    one_frame_episode = int(np.sum(LENGTHS[:1]))  # episode 1 has a single frame
    s = ds[one_frame_episode]
    np.testing.assert_array_equal(s["action_is_pad"], [True, False, True, True])
    assert s["action"].shape == (4, 4)
    np.testing.assert_array_equal(s["action"][:, 0], [frame_state(1, 0) + 0.5] * 4)
    top = s["observation.images.top"]
    assert top.shape == (3, 48, 64, 3)
    assert [decode_frame_leds(f) for f in top] == [0, 0, 0]
    np.testing.assert_array_equal(s["observation.images.top_is_pad"], [True, False, True])
    assert s["observation.images.wrist"].shape == (40, 72, 3)  # one-frame window: squeezed
    assert s["observation.images.wrist_is_pad"].shape == (1,)

    mid = int(np.sum(LENGTHS[:3])) + 5  # episode 3, frame 5 of 17
    s = ds[mid]
    assert [decode_frame_leds(f) for f in s["observation.images.top"]] == [3, 5, 6]
    np.testing.assert_array_equal(
        s["action"][:, 0], [frame_state(3, t) + 0.5 for t in (4, 5, 6, 7)]
    )
    assert not s["action_is_pad"].any()


@pytest.mark.processes
def test_tasks_follow_each_frames_task_index(converted):
    ds = jaxload.open(converted)
    ep2 = ds.__getitems__([6, 7])  # the multi-task episode: first half "fold", second "stack"
    assert [s["task"] for s in ep2] == ["fold", "stack"]


@pytest.mark.processes
def test_episode_subset_reads_only_those_episodes(converted):
    ds = jaxload.open(converted, episodes=[3, 1])
    assert len(ds) == LENGTHS[1] + LENGTHS[3]
    assert ds.episode_index.tolist() == [1, 3]
    assert int(ds[0]["episode_index"]) == 1 and int(ds[1]["frame_index"]) == 0
    assert int(ds[1]["index"]) == sum(LENGTHS[:3])


@pytest.mark.processes
def test_reads_are_thread_safe(converted):
    ds = jaxload.open(converted, delta_timestamps={"observation.images.top": [-0.1, 0.0]})
    expected = [ds[i] for i in range(len(ds))]
    barrier = threading.Barrier(4)

    def read(offset):
        barrier.wait()
        return [ds[(i + offset) % len(ds)] for i in range(len(ds))]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(read, range(4)))
    for offset, samples in enumerate(results):
        for i, s in enumerate(samples):
            e = expected[(i + offset) % len(ds)]
            np.testing.assert_array_equal(s["observation.images.top"], e["observation.images.top"])
            assert s["index"] == e["index"]


@pytest.mark.processes
def test_pickles_and_serves_grain_worker_processes(converted):
    import grain

    ds = jaxload.open(converted, delta_timestamps={"action": [0.0, 0.1]})
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[7]["action"], ds[7]["action"])
    pipeline = (
        grain.MapDataset.source(ds)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    indices = [int(s["index"]) for s in pipeline]
    assert indices == list(range(len(ds)))


@pytest.mark.processes
def test_output_bytes_do_not_depend_on_worker_count(source, converted, tmp_path):
    convert(source, tmp_path / "one", workers=1, gop=4, progress=False)
    assert tree_bytes(tmp_path / "one") == tree_bytes(converted)


def test_small_shards_split_between_episodes(source, tmp_path):
    convert(source, tmp_path / "ds", workers=1, gop=4, shard_bytes=1, progress=False)
    ds = jaxload.open(tmp_path / "ds")
    assert ds.info.num_shards == len(LENGTHS)
    assert [int(s["index"]) for s in ds.__getitems__([0, 5, 8, 30])] == [0, 5, 8, 30]


def test_copy_keeps_an_h264_stream_bit_exact(tmp_path):
    src = write_lerobot_v3(tmp_path / "src", episode_lengths=(4, 1, 7), video_codec="h264")
    report = convert(src, tmp_path / "ds", video_codec="copy", workers=1, progress=False)
    assert report.psnr["observation.images.top"][0] == float("inf")
    ds = jaxload.open(tmp_path / "ds")
    assert [decode_frame_leds(ds[i]["observation.images.top"]) for i in range(len(ds))] == [
        0,
        1,
        2,
        3,
        0,
        0,
        1,
        2,
        3,
        4,
        5,
        6,
    ]


def test_hevc_round_trips(tmp_path):
    src = write_lerobot_v3(tmp_path / "src", episode_lengths=(6, 2))
    report = convert(src, tmp_path / "ds", video_codec="hevc", workers=1, progress=False)
    assert report.psnr["observation.images.top"][0] >= 38
    ds = jaxload.open(tmp_path / "ds")
    assert ds.info.cameras["observation.images.top"].codec == "hevc"
    assert decode_frame_leds(ds[5]["observation.images.top"]) == 5


def test_h264_is_tuned_for_fast_decoding_unless_asked_not_to(tmp_path):
    src = write_lerobot_v3(tmp_path / "src", episode_lengths=(12,))
    convert(src, tmp_path / "fast", workers=1, progress=False)
    convert(src, tmp_path / "plain", tune="", workers=1, progress=False)
    fast, plain = jaxload.open(tmp_path / "fast"), jaxload.open(tmp_path / "plain")
    assert fast.info.converter["tune"] == "fastdecode" and plain.info.converter["tune"] is None
    assert fast.fingerprint != plain.fingerprint  # other bytes (CAVLC, no deblocking) ...
    for i in (0, 7, 11):  # ... the same frames
        assert decode_frame_leds(fast[i]["observation.images.top"]) == i
    hevc = convert(src, tmp_path / "hevc", video_codec="hevc", workers=1, progress=False)
    assert hevc.psnr  # hevc takes no tune by default
    with pytest.raises(JaxloadError, match="h264 or lossless only"):
        convert(src, tmp_path / "bad", video_codec="hevc", tune="fastdecode", progress=False)
    assert not leftovers(tmp_path, "bad")


def test_episode_selection_spec(source, tmp_path):
    assert parse_episodes("0-2, 5,4") == [0, 1, 2, 4, 5]
    convert(source, tmp_path / "ds", episodes="3,5", workers=1, progress=False)
    assert jaxload.open(tmp_path / "ds").episode_index.tolist() == [3, 5]
    with pytest.raises(
        JaxloadError, match=r"--episodes 5,9: episode 9 does not exist \(this dataset has 0-5\)"
    ):
        convert(source, tmp_path / "bad", episodes="5,9", workers=1, progress=False)
    assert not leftovers(tmp_path, "bad")


def test_refuses_to_overwrite_existing_output(source, tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "mine.txt").write_text("user data")
    with pytest.raises(JaxloadError, match="refusing to overwrite"):
        convert(source, out, workers=1, progress=False)
    assert (out / "mine.txt").read_text() == "user data"


def test_converts_into_an_existing_empty_directory(tmp_path):
    src = write_lerobot_v3(tmp_path / "src", episode_lengths=(3,), cameras={})
    (tmp_path / "ds").mkdir()
    convert(src, tmp_path / "ds", workers=1, progress=False)
    assert len(jaxload.open(tmp_path / "ds")) == 3


@pytest.mark.processes
def test_speed_key_is_the_episodes_speed_bucket(converted):
    from jaxload.stats.speed import speed_labels

    ds = jaxload.open(converted, speed=True)
    labels = speed_labels(ds)
    samples = ds.__getitems__([0, 5, 6, 8])
    for s in samples:
        episode = int(np.flatnonzero(ds.episode_index == s["episode_index"])[0])
        assert s["speed"] == labels[episode] and s["speed"].dtype == np.int64
    speed = ds.element_spec()["speed"]
    assert (speed.shape, speed.dtype) == ((), np.dtype(np.int64))
    assert "speed" not in jaxload.open(converted)[0]
