"""Windows at each dataset's own fps (jaxload.sources.windows): frames, seconds on
every grid or refused with the nearest valid values, snapping, and the warning for
windows that are mostly padding."""

from __future__ import annotations

import types

import numpy as np
import pytest

from jaxload import DatasetSource
from jaxload.episode_dataset import MapDataset
from jaxload.errors import WindowError
from jaxload.sources.windows import padded_share, resolve_windows, warn_mostly_padded
from tests.support.fake_dataset import FakeDataset

KEYS = {"action": None, "observation.state": None}
FPS = {"out/a30": 30, "out/b25": 25, "out/c10": 10}


def _info(source):
    return types.SimpleNamespace(fps=FPS[source.path], features=KEYS, cameras={"cam": None})


def _resolve(sources, seconds=None, frames=None, snap=False):
    return resolve_windows(
        [DatasetSource(s) if isinstance(s, str) else s for s in sources],
        seconds,
        frames,
        snap=snap,
        read_info=_info,
    )


def test_frames_are_counted_at_each_datasets_own_fps():
    a, b, c = _resolve(list(FPS), frames={"action": range(4), "cam": [-1, 0]})
    for source in (a, b, c):  # integers as given: never through seconds
        assert source.delta_frames == {"action": [0, 1, 2, 3], "cam": [-1, 0]}
        assert all(type(f) is int for f in source.delta_frames["action"])
        assert source.delta_timestamps is None
    with pytest.raises(WindowError, match=r"\[0.5\] are not whole frames"):
        _resolve(["out/a30"], frames={"action": [0, 0.5]})


def test_seconds_off_a_grid_name_the_dataset_its_fps_and_the_nearest_values():
    with pytest.raises(WindowError) as e:
        _resolve(["out/a30", "out/b25"], seconds={"action": [k / 30 for k in range(3)]})
    message = str(e.value)
    assert message.startswith("out/b25 (25 fps): delta_timestamps['action']")
    assert "nearest valid values are [0.04, 0.08]" in message and "delta_frames=" in message
    assert "snap_windows=True" in message
    snapped = _resolve(
        ["out/a30", "out/b25"], seconds={"action": [k / 30 for k in range(3)]}, snap=True
    )
    assert snapped[1].delta_frames["action"] == [0, 1, 2]  # 0, 0.04, 0.08 s at 25 fps
    both = _resolve(["out/a30", "out/c10"], seconds={"action": [0.0, 0.1, 0.2]})
    assert both[0].delta_frames["action"] == [0, 3, 6]  # 0, 0.1, 0.2 s at 30 fps
    assert both[1].delta_frames["action"] == [0, 1, 2]  # at 10 fps


def test_shared_keys_go_where_they_exist_and_own_windows_replace_them():
    own = DatasetSource("out/c10", delta_frames={"observation.state": [-1, 0]})
    a, c = _resolve(["out/a30", own], frames={"action": range(2)})
    assert set(a.delta_frames) == {"action"}
    assert set(c.delta_frames) == {"observation.state"}
    with pytest.raises(WindowError, match=r"\['nope'\] are in none of the datasets"):
        _resolve(["out/a30", "out/c10"], frames={"nope": [0]})
    with pytest.raises(WindowError, match=r"window key 'nope' is not in this dataset"):
        _resolve([DatasetSource("out/a30", delta_frames={"nope": [0]})])
    with pytest.raises(WindowError, match=r"\['action'\] given both"):
        _resolve(["out/a30", "out/c10"], seconds={"action": [0]}, frames={"action": [0]})


def test_padded_share_is_exact():
    rng = np.random.default_rng(0)
    for _ in range(30):
        lengths = rng.integers(0, 12, size=rng.integers(1, 6))
        offsets = rng.integers(-15, 15, size=rng.integers(1, 5))
        first, last = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        padded = total = 0
        for length in lengths:
            for anchor in range(first, length - last):
                for o in offsets:
                    total += 1
                    padded += not 0 <= anchor + o < length
        want = padded / total if total else 0.0
        assert np.isclose(padded_share(lengths, offsets, first, last), want)


def test_windows_in_frames_given_as_seconds_are_warned_about():
    ds = FakeDataset([20, 30], fps=30, delta_timestamps={"action": list(range(16))})
    with pytest.warns(
        UserWarning,
        match=r"(9\d|8\d)% of the 'action' window.*delta_frames=\{'action': range\(0, 16\)\}",
    ):
        warn_mostly_padded(["out/a"], [MapDataset(ds)])
    fine = FakeDataset([20, 30], fps=30, delta_timestamps={"action": [k / 30 for k in range(16)]})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_mostly_padded(["out/a"], [MapDataset(fine)])
