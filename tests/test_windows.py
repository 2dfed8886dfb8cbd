import numpy as np
import pytest

from jaxload.errors import WindowError
from jaxload.windows import resolve_delta_timestamps, window_frames


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
