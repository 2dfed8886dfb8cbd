"""Windows in frames (jaxload.windows): delta_timestamps checked against the frame grid
and turned into frame offsets, delta_frames taken as they are, and the frames a window
reads inside its episode, with pads."""

import numpy as np
import pytest

from jaxload.errors import WindowError
from jaxload.windows import (
    frames_on_grid,
    off_grid_message,
    resolve_delta_timestamps,
    resolve_windows_in_frames,
    window_frames,
)


def test_offsets_are_rounded_frame_multiples():
    offsets = resolve_delta_timestamps(
        {"action": [k / 30 for k in range(4)], "state": [-2 / 30, -1 / 30, 0.0]},
        fps=30,
        valid_keys=["action", "state"],
    )
    np.testing.assert_array_equal(offsets["action"], [0, 1, 2, 3])
    np.testing.assert_array_equal(offsets["state"], [-2, -1, 0])


def test_non_multiple_of_frame_period_is_refused_with_the_key():
    with pytest.raises(WindowError, match=r"action.*0\.05.*1/10"):
        resolve_delta_timestamps({"action": [0.0, 0.05]}, fps=10, valid_keys=["action"])


def test_within_tolerance_is_accepted():
    offsets = resolve_delta_timestamps({"a": [0.1 + 5e-5]}, fps=10, valid_keys=["a"])
    np.testing.assert_array_equal(offsets["a"], [1])


def test_unknown_key_names_the_key_and_the_valid_ones():
    with pytest.raises(WindowError, match=r"'actoin'.*action"):
        resolve_delta_timestamps({"actoin": [0.0]}, fps=10, valid_keys=["action"])


def test_empty_window_is_refused():
    with pytest.raises(WindowError, match="empty"):
        resolve_delta_timestamps({"action": []}, fps=10, valid_keys=["action"])


def test_window_clamps_to_episode_and_flags_pads():
    frames, pad = window_frames(np.array([0, 2, 4]), np.array([5, 5, 5]), np.array([-1, 0, 1]))
    np.testing.assert_array_equal(frames, [[0, 0, 1], [1, 2, 3], [3, 4, 4]])
    np.testing.assert_array_equal(pad, [[True, False, False], [False] * 3, [False, False, True]])


def test_one_frame_episode_pads_everything_but_the_anchor():
    frames, pad = window_frames(np.array([0]), np.array([1]), np.array([-2, 0, 3]))
    np.testing.assert_array_equal(frames, [[0, 0, 0]])
    np.testing.assert_array_equal(pad, [[True, False, True]])


@pytest.mark.parametrize("offset", [1e18, -1e18, 2e11])
def test_an_offset_past_int64_is_refused_with_the_key(offset):
    """1e18 s at 10 fps is 1e19 frames: it wrapped around int64 (before: a window of
    garbage frames from jaxload.open, an OverflowError from make_loader)."""
    with pytest.raises(WindowError, match=r"delta_timestamps\['action'\]: .* more than 2\*\*40"):
        resolve_delta_timestamps({"action": [0.0, offset]}, fps=10, valid_keys=["action"])
    assert isinstance(WindowError("x"), ValueError)


def test_windows_in_frames_are_kept_as_the_integers_they_are():
    offsets = resolve_windows_in_frames(
        {"action": [0.0, 0.1]}, {"state": [-1, 0], "cam": np.array([-2.0, 0.0])}, 10,
        ["action", "state", "cam"],
    )  # fmt: skip
    assert {k: v.tolist() for k, v in offsets.items()} == {
        "action": [0, 1], "state": [-1, 0], "cam": [-2, 0],
    }  # fmt: skip
    assert offsets["cam"].dtype == np.int64 and offsets["state"].dtype == np.int64
    assert resolve_windows_in_frames(None, None, 10, ["a"]) == {}


@pytest.mark.parametrize(
    "frames, message",
    [
        ({"nope": [0]}, r"delta_frames: unknown key 'nope'; this dataset has action, state"),
        ({"action": [0]}, r"'action' given both in delta_timestamps and delta_frames"),
        ({"state": []}, r"delta_frames\['state'\] is empty"),
        ({"state": [0.5, 1.0]}, r"\[0\.5, 1\.0\] are not whole frames; delta_frames counts"),
        ({"state": [float("nan")]}, r"are not whole frames"),
        ({"state": [2**41]}, r"delta_frames\['state'\]: offsets past 2\*\*40 frames"),
    ],
)
def test_bad_windows_in_frames_are_refused_naming_the_key(frames, message):
    with pytest.raises(WindowError, match=message):
        resolve_windows_in_frames({"action": [0.0]}, frames, 10, ["state", "action"])


def test_the_grid_check_finds_the_nearest_frames_and_says_them():
    frames, bad = frames_on_grid(np.array([0.0, 0.04, 0.05, -0.04]), fps=25)
    assert frames.tolist() == [0, 1, 1, -1] and bad.tolist() == [False, False, True, False]
    message = off_grid_message("action", [0.0, 0.05], 25)
    assert message.startswith("delta_timestamps['action']: [0.05] s are not multiples of 1/fps")
    assert "the nearest valid values are [0.04] (frames [1])" in message
