"""ColorJitter (jaxload.transforms.color): identity, grey and brightness on real frames, and
the colour matrices it is built of."""

import numpy as np

from jaxload.transforms import ColorJitter
from tests.transforms.test_compose import _frames


def test_color_jitter_identity_grey_and_brightness():
    frames = _frames(2)[:, None]
    same = ColorJitter()
    np.testing.assert_array_equal(
        same.apply_numpy(frames, same.draw(np.zeros((2, 4)), (60, 80))), frames
    )
    grey = ColorJitter(saturation=(0.0, 0.0))
    out = grey.apply_numpy(frames, grey.draw(np.zeros((2, 4)), (60, 80))).astype(int)
    assert (
        np.abs(out[..., 0] - out[..., 1]).max() <= 1
        and np.abs(out[..., 1] - out[..., 2]).max() <= 1
    )
    dark = ColorJitter(brightness=(0.5, 0.5))
    out = dark.apply_numpy(frames, dark.draw(np.zeros((2, 4)), (60, 80))).astype(int)
    assert np.abs(out - np.round(frames / 2)).max() <= 1


def test_the_colour_matrices_keep_grey_grey_and_are_the_identity_at_rest():
    from jaxload.transforms.color import LUMA, hue_matrix, saturation_matrix

    np.testing.assert_allclose(saturation_matrix(np.array([1.0]))[0], np.eye(3))
    np.testing.assert_allclose(saturation_matrix(np.array([0.0]))[0], np.stack([LUMA] * 3))
    np.testing.assert_allclose(
        hue_matrix(np.array([0.0, 1.0])), np.stack([np.eye(3)] * 2), atol=1e-3
    )
    turns = np.linspace(-0.5, 0.5, 11)
    for matrix in (hue_matrix(turns), saturation_matrix(np.linspace(0, 3, 11))):
        np.testing.assert_allclose(matrix.sum(axis=-1), 1.0, atol=1e-3)  # grey -> same grey
    # a turn of a third moves pure red's energy towards green (W3C hue-rotate(120deg))
    red = hue_matrix(np.array([1 / 3]))[0] @ np.array([1.0, 0.0, 0.0])
    assert red.argmax() == 1


def test_zero_contrast_makes_each_frame_its_own_mean_grey():
    frames = np.stack([_frames(1, seed=1)[0], _frames(1, seed=2)[0] // 3])[None]  # a window
    flat = ColorJitter(contrast=(0.0, 0.0))
    out = flat.apply_numpy(frames, flat.draw(np.zeros((1, 4)), (60, 80))).astype(float)
    luma = np.array([0.2126, 0.7152, 0.0722])
    for t in range(2):
        mean = float((frames[0, t].reshape(-1, 3) @ luma).mean())
        assert np.abs(out[0, t] - mean).max() <= 1.0, t  # one grey, the frame's own mean
    assert abs(out[0, 0].mean() - out[0, 1].mean()) > 20


def test_draws_stay_within_the_ranges_asked_for():
    jitter = ColorJitter(brightness=(0.5, 0.7), hue=0.0)
    u = np.random.default_rng(0).random((200, 4))
    p = jitter.draw(u, (60, 80))
    assert p["matrix"].dtype == np.float32 and p["matrix"].shape == (200, 3, 3)
    # brightness only: the matrix is b * I with b in [0.5, 0.7]
    diagonal = p["matrix"][:, [0, 1, 2], [0, 1, 2]]
    assert diagonal.min() >= 0.5 - 1e-3 and diagonal.max() <= 0.7 + 1e-3
    np.testing.assert_allclose(p["offset"], 0.0, atol=1e-6)  # contrast 1: no offset
    # each factor reads its own uniform: brightness 0, contrast 1, saturation 2, hue 3
    both = ColorJitter(brightness=(0.5, 1.5), contrast=(0.2, 0.4))
    q = both.draw(np.array([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]), (60, 80))
    np.testing.assert_allclose(q["offset"], [(1 - 0.4) * 0.5, (1 - 0.2) * 1.5], rtol=1e-5)
