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
