"""The geometric steps (jaxload.transforms.geometry): resizes, crops, rotation cut and turn
where their parameters say, random boxes follow scale and ratio, and sizes a step cannot
apply to are refused naming the step and the size."""

import cv2
import numpy as np
import pytest

from jaxload.transforms import (
    CenterCrop,
    RandomCrop,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    ResizeWithPad,
)
from tests.transforms.test_compose import _frames


def test_resize_with_pad_keeps_the_aspect_ratio_and_centers_the_picture():
    frames = np.full((1, 1, 60, 80, 3), 200, np.uint8)
    out = ResizeWithPad((40, 40)).apply_numpy(frames, {})
    # 80x60 fits 40x40 as 40x30 (openpi: int(60 / 2)), padding 5 rows above, 5 below
    assert out.shape == (1, 1, 40, 40, 3)
    assert (out[0, 0, :5] == 0).all() and (out[0, 0, 35:] == 0).all()
    assert (out[0, 0, 5:35] == 200).all()


def test_crops_cut_where_their_parameters_say():
    frames = _frames(4)[:, None]
    np.testing.assert_array_equal(
        CenterCrop((20, 30)).apply_numpy(frames, {}), frames[:, :, 20:40, 25:55]
    )
    crop = RandomCrop((20, 30))
    params = crop.draw(np.random.default_rng(0).random((4, 2)), (60, 80))
    out = crop.apply_numpy(frames, params)
    for r in range(4):
        t, l = params["top"][r], params["left"][r]  # noqa: E741
        np.testing.assert_array_equal(out[r], frames[r, :, t : t + 20, l : l + 30])
    assert params["top"].max() <= 40 and params["left"].max() <= 50


def test_random_resized_crop_boxes_follow_scale_and_ratio():
    step = RandomResizedCrop(32, scale=(0.2, 0.6), ratio=(0.5, 2.0))
    p = step.draw(np.random.default_rng(1).random((5000, step.num_uniforms)), (60, 80))
    area = p["height"] * p["width"] / (60 * 80)
    aspect = p["width"] / p["height"]
    assert area.min() >= 0.18 and area.max() <= 0.62  # rounding to whole pixels
    assert aspect.min() >= 0.45 and aspect.max() <= 2.1
    assert (p["top"] >= 0).all() and (p["top"] + p["height"] <= 60).all()
    assert (p["left"] >= 0).all() and (p["left"] + p["width"] <= 80).all()
    # no try can fit a 1:20 box into 60x80: the whole frame cut to the nearest ratio
    thin = RandomResizedCrop(32, scale=(0.9, 1.0), ratio=(20.0, 30.0))
    q = thin.draw(np.random.default_rng(2).random((3, thin.num_uniforms)), (60, 80))
    assert (q["width"] == 80).all() and (q["height"] == 4).all() and (q["top"] == 28).all()


def test_rotation_turns_counter_clockwise_like_opencv():
    frame = np.zeros((1, 1, 41, 41, 3), np.uint8)
    frame[0, 0, 20, 30] = 255  # right of the center
    step = RandomRotation((90, 90))
    out = step.apply_numpy(frame, step.draw(np.zeros((1, 1)), (41, 41)))
    y, x = np.unravel_index(out[0, 0, ..., 0].argmax(), (41, 41))
    assert (y, x) == (10, 20)  # now above the center
    forward = cv2.warpAffine(frame[0, 0], cv2.getRotationMatrix2D((20, 20), 90, 1.0), (41, 41))
    np.testing.assert_array_equal(out[0, 0], forward)


def test_crops_larger_than_the_frame_are_refused_naming_the_step_and_the_size():
    with pytest.raises(ValueError, match=r"CenterCrop\(70, 30\) is larger than the 60x80 frames"):
        CenterCrop((70, 30)).output_size((60, 80))
    with pytest.raises(ValueError, match=r"RandomCrop\(10, 90\) is larger than the 60x80"):
        RandomCrop((10, 90)).output_size((60, 80))
    assert CenterCrop(60).output_size((60, 80)) == (60, 60)  # as large as the frame: fine
    assert RandomCrop((60, 80)).output_size((60, 80)) == (60, 80)
    assert Resize((200, 300)).output_size((60, 80)) == (200, 300)  # resizes any size
    with pytest.raises(ValueError, match="scale must allow an area > 0"):
        RandomResizedCrop(8, scale=(0.0, 0.0))


def test_resize_keeps_leading_axes_flat_colour_and_returns_same_sized_frames_as_they_are():
    from jaxload.transforms.geometry import resize_numpy

    frames = _frames(6).reshape(2, 3, 60, 80, 3)
    assert resize_numpy(frames, (60, 80)) is frames
    out = Resize((30, 20)).apply_numpy(frames, {})
    assert out.shape == (2, 3, 30, 20, 3) and out.dtype == np.uint8
    flat = np.full((1, 1, 60, 80, 3), (10, 120, 250), np.uint8)
    for size in ((30, 40), (120, 160), (7, 13)):  # shrink (antialiased), grow, odd
        got = Resize(size).apply_numpy(flat, {})
        assert (got == np.array([10, 120, 250], np.uint8)).all(), size
    # each output row is its own frame's (rows are not mixed by the flattening)
    np.testing.assert_array_equal(
        resize_numpy(frames, (30, 20))[1, 2], resize_numpy(frames[1, 2][None], (30, 20))[0]
    )


def test_crop_weights_resample_the_crop_alone_and_sum_to_one():
    from jaxload.transforms.geometry import crop_weights

    # a crop as long as the output: the identity on the crop's pixels
    w = np.asarray(crop_weights(4, 10, np.array([3]), np.array([4])))
    np.testing.assert_allclose(w[0], np.eye(10)[3:7], atol=1e-6)
    # shrinking 8 -> 2 from pixel 1: every weight inside [1, 9), each row a mean
    w = np.asarray(crop_weights(2, 12, np.array([1, 4]), np.array([8, 8])))
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-6)
    assert (w[0, :, :1] == 0).all() and (w[0, :, 9:] == 0).all()
    assert (w[1, :, :4] == 0).all()
    np.testing.assert_allclose(w[0, 0, 1:5].sum(), w[0, 1, 5:9].sum(), rtol=1e-6)  # symmetric


def test_random_resized_crop_falls_back_to_the_whole_frame_cut_to_the_nearest_ratio():
    tall = RandomResizedCrop(16, scale=(0.95, 1.0), ratio=(0.05, 0.06))  # no try fits
    q = tall.draw(np.random.default_rng(3).random((2, tall.num_uniforms)), (60, 80))
    assert (q["height"] == 60).all() and (q["width"] == 4).all() and (q["left"] == 38).all()
    square = RandomResizedCrop(16, scale=(0.999, 1.0), ratio=(1.0, 2.0))
    assert square._fallback((60, 80)) == (60, 80)  # the frame's ratio is allowed
    out = tall.apply_numpy(_frames(2)[:, None], q)
    assert out.shape == (2, 1, 16, 16, 3)


def test_a_rotation_by_zero_is_the_identity_and_draws_stay_in_their_range():
    frames = _frames(3)[:, None]
    still = RandomRotation(0)
    np.testing.assert_array_equal(
        still.apply_numpy(frames, still.draw(np.random.default_rng(0).random((3, 1)), (60, 80))),
        frames,
    )
    step = RandomRotation((10, 20))
    inverse = step.draw(np.random.default_rng(0).random((500, 1)), (60, 80))["inverse"]
    angles = np.rad2deg(np.arctan2(inverse[:, 1, 0], inverse[:, 0, 0]))
    assert angles.min() >= 10 - 1e-4 and angles.max() <= 20 + 1e-4
    # the center stays where it is
    center = np.array([(80 - 1) / 2, (60 - 1) / 2, 1.0])
    np.testing.assert_allclose(inverse @ center, np.broadcast_to(center[:2], (500, 2)), atol=1e-3)
