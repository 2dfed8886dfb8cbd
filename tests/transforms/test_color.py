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
