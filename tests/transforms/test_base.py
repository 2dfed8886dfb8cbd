"""What an image transform step is (jaxload.transforms.base): a custom step by subclassing,
steps compared by value, and the argument checks every step uses."""

import numpy as np
import pytest

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


def test_steps_compare_and_hash_by_value_and_repr_says_their_fields():
    from jaxload.transforms import CenterCrop, ColorJitter, RandomCrop

    assert CenterCrop(20) == CenterCrop((20, 20)) and hash(CenterCrop(20)) == hash(
        CenterCrop((20, 20))
    )
    assert CenterCrop(20) != CenterCrop(21)
    assert CenterCrop(20) != RandomCrop(20)  # same fields, another step
    assert repr(ColorJitter(hue=0.1)) == (
        "ColorJitter(brightness=(1.0, 1.0), contrast=(1.0, 1.0), saturation=(1.0, 1.0), "
        "hue=(-0.1, 0.1))"
    )
    assert len({CenterCrop(20), CenterCrop((20, 20)), RandomCrop(20)}) == 2


def test_a_step_without_its_implementations_says_so():
    bare = ImageTransform()
    assert bare.output_size((3, 4)) == (3, 4) and bare.draw(np.zeros((2, 0)), (3, 4)) == {}
    with pytest.raises(NotImplementedError):
        bare.apply_numpy(np.zeros((1, 1, 3, 4, 3), np.uint8), {})
    with pytest.raises(NotImplementedError):
        bare.apply_jax(np.zeros((1, 1, 3, 4, 3), np.float32), {})


def test_pair_takes_two_positive_ints_or_a_square():
    from jaxload.transforms.base import pair

    assert pair("S", 5) == (5, 5) and pair("S", [3, np.int64(4)]) == (3, 4)
    for bad in ((0, 4), (3,), (3, 4, 5), (3.0, 4), (True, 4), "34", None, -2):
        with pytest.raises(ValueError, match=r"S: size must be an int \(a square\) or"):
            pair("S", bad)
    with pytest.raises(ValueError, match=r"S: size must be \(height, width\) of positive ints"):
        pair("S", 5, square_ok=False)


def test_interval_takes_a_pair_within_bounds_or_a_spread_around_its_center():
    from jaxload.transforms.base import interval

    assert interval("b", 0.3, center=1.0, low=0.0, high=10.0) == (0.7, 1.3)
    assert interval("b", 2.5, center=1.0, low=0.0, high=10.0) == (0.0, 3.5)  # clipped at low
    assert interval("b", (0.2, 0.4), center=1.0, low=0.0, high=10.0) == (0.2, 0.4)
    assert interval("s", (0.5, 0.5), center=None, low=0.0, high=1.0) == (0.5, 0.5)
    with pytest.raises(
        ValueError, match=r"s must be a pair \(lo, hi\) with 0 <= lo <= hi <= 1, got 0.5"
    ):
        interval("s", 0.5, center=None, low=0.0, high=1.0)  # no center: a number is no range
    for bad in ((0.4, 0.2), (-0.1, 0.5), (0.5, 1.5), (0.1, float("nan")), (True, 1), "x"):
        with pytest.raises(ValueError, match="s must be a pair"):
            interval("s", bad, center=None, low=0.0, high=1.0)
    with pytest.raises(ValueError, match=r"d must be a number v in \[0, 180\] \(meaning \[0 - v"):
        interval("d", 181, center=0.0, low=-180.0, high=180.0)


def test_randint_is_uniform_over_each_rows_count_and_never_reaches_it():
    from jaxload.transforms.base import randint

    u = np.array([0.0, 0.2499, 0.25, 0.999999, 1 - 2**-53])
    np.testing.assert_array_equal(randint(u, 4), [0, 0, 1, 3, 3])
    counts = np.array([1, 2, 3, 7, 41])
    assert ((randint(u, counts) >= 0) & (randint(u, counts) < counts)).all()
    draws = randint(np.random.default_rng(0).random(70_000), 7)
    np.testing.assert_allclose(np.bincount(draws) / 70_000, 1 / 7, atol=0.01)
