"""The benchmark's windows (jaxload.tools.bench.windows): LeRobot-named keys the dataset
has, in seconds at its fps, and the video frames one sample delivers."""

from types import SimpleNamespace

import pytest

from jaxload.tools import bench


@pytest.mark.integration  # with the benchmark harness's tests (tests/tools/test_bench.py)
def test_bench_windows():
    info = SimpleNamespace(
        fps=10,
        features={"action": None, "observation.state": None},
        cameras={"cam.b": None, "cam.a": None},
    )
    windows = bench.bench_windows(SimpleNamespace(info=info))
    assert windows["action"] == [k / 10 for k in range(16)]
    assert windows["observation.state"] == [-0.2, -0.1, 0.0]
    assert windows["cam.a"] == [-0.1, 0.0] and windows["cam.b"] == [0.0]
    assert bench.frames_per_sample(windows, ["cam.a", "cam.b"]) == 3


def test_keys_the_dataset_lacks_are_left_out_and_offsets_follow_its_fps():
    info = SimpleNamespace(fps=30, features={"observation.state": None}, cameras={})
    assert bench.bench_windows(SimpleNamespace(info=info)) == {
        "observation.state": [-2 / 30, -1 / 30, 0.0]
    }
    cameras_only = SimpleNamespace(fps=5, features={}, cameras={"z": None, "a": None, "m": None})
    windows = bench.bench_windows(SimpleNamespace(info=cameras_only))
    assert windows == {"a": [-0.2, 0.0], "m": [0.0], "z": [0.0]}  # the first in name order
    # frames per sample: a window's length per camera, 1 for a camera without one
    assert bench.frames_per_sample({"a": [-0.2, 0.0], "action": [0.0] * 16}, ["a", "b"]) == 3
    assert bench.frames_per_sample(windows, []) == 0


@pytest.mark.integration
def test_a_dataset_path_is_read_for_its_features(small):
    import jaxload

    _, path = small
    ds = jaxload.open(path)
    windows = bench.bench_windows(path)
    assert bench.bench_windows(ds) == windows
    first, *others = sorted(ds.camera_keys)
    assert windows[first] == [-1 / ds.fps, 0.0] and all(windows[c] == [0.0] for c in others)
    assert len(windows["action"]) == 16 and len(windows["observation.state"]) == 3
