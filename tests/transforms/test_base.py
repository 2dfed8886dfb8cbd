"""What an image transform step is (jaxload.transforms.base): a custom step by subclassing,
steps compared by value, and the argument checks every step uses."""

import numpy as np

from jaxload.transforms import ImageTransform, ImageTransforms
from tests.transforms.test_compose import _frames


def test_a_custom_step_subclasses_image_transform():
    class Invert(ImageTransform):
        def apply_numpy(self, frames, params):
            return 255 - frames

        def apply_jax(self, frames, params):
            return 255.0 - frames

    frames = _frames(2)
    np.testing.assert_array_equal(
        ImageTransforms([Invert()]).apply({"c": frames}, np.arange(2), 0)["c"], 255 - frames
    )
