"""The geometric steps (jaxload.transforms.geometry): resizes, crops, rotation cut and turn
where their parameters say, random boxes follow scale and ratio, and sizes a step cannot
apply to are refused naming the step and the size."""

import cv2
import numpy as np

from jaxload.transforms import (
    CenterCrop,
    RandomCrop,
    RandomResizedCrop,
    RandomRotation,
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
