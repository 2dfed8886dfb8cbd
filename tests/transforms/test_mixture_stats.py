"""Normalize for mixtures: per dataset by `dataset_index` (numpy and inside jax.jit), vectors
of several sizes padded with the identity, and stats pooled per dimension."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxload.stats import FeatureStats, Moments, merge_stats
from jaxload.transforms import Normalize
from jaxload.transforms.mixture_stats import merge_padded


def _stats(values: np.ndarray) -> FeatureStats:
    m = Moments(values.shape[-1])
    m.update(values)
    q = {name: np.quantile(values, p, axis=0) for name, p in (("q01", 0.01), ("q99", 0.99))}
    return FeatureStats(m.count, m.mean, m.std, m.min, m.max, q)


RNG = np.random.default_rng(0)
A = RNG.normal(3.0, 2.0, size=(200, 3))  # a 3-dim state
B = RNG.normal(-1.0, 0.5, size=(100, 4))  # a 4-dim one (padded to 4 in a mixture)


def _batch():
    state = np.zeros((4, 2, 4), np.float32)  # (rows, window, padded dims)
    state[0, :, :3], state[1, :, :] = A[:2], B[:2]
    state[2, :, :3], state[3, :, :] = A[2:4], B[2:4]
    image = RNG.integers(0, 255, size=(4, 2, 2, 3), dtype=np.uint8)
    return {"observation.state": state, "dataset_index": np.array([0, 1, 0, 1]), "img": image}


def test_each_row_is_normalized_with_its_own_datasets_stats():
    parts = [
        {"observation.state": _stats(A), "img": _image_stats(0.5, 0.25)},
        {"observation.state": _stats(B)},  # no image stats: the identity (after /255)
    ]
    norm = Normalize(parts, {"observation.state": "mean_std", "img": "min_max"})
    batch = _batch()
    out = norm(batch)["observation.state"]
    for row, values in enumerate([A, B, A, B]):
        width = values.shape[1]
        want = (batch["observation.state"][row, :, :width] - values.mean(0)) / (
            values.std(0) + 1e-8
        )
        assert np.allclose(out[row, :, :width], want, atol=1e-5)
        assert np.array_equal(out[row, :, width:], batch["observation.state"][row, :, width:])
    back = norm.unnormalize({**batch, "observation.state": out})["observation.state"]
    assert np.allclose(back, batch["observation.state"], atol=1e-4)
    jitted = jax.jit(norm.normalize)(jax.tree.map(jnp.asarray, batch))
    for key in ("observation.state", "img"):
        assert np.allclose(np.asarray(jitted[key]), norm(batch)[key], atol=1e-5), key
    img = norm(batch)["img"]
    assert np.allclose(img[1], batch["img"][1] / 255.0)  # dataset 1: identity after scaling


def _image_stats(lo: float, hi: float) -> FeatureStats:
    shape = (3, 1, 1)
    full = np.full(shape, 1.0)
    return FeatureStats(10, full * 0.5, full * 0.1, full * lo, full * hi, {})


def test_one_dataset_needs_no_dataset_index_and_many_do():
    norm = Normalize([{"observation.state": _stats(A)}], {"observation.state": "min_max"})
    x = {"observation.state": A[:5].astype(np.float32)}
    assert np.allclose(norm(x)["observation.state"].min(), -1, atol=1) and "per dataset" in repr(
        norm
    )
    two = Normalize([{"observation.state": _stats(A)}, {}], {"observation.state": "min_max"})
    with pytest.raises(KeyError, match="no 'dataset_index'"):
        two(x)


def test_pooled_stats_merge_each_dimension_over_the_datasets_that_have_it():
    pooled = merge_padded([{"s": _stats(A)}, {"s": _stats(B)}])["s"]
    both = np.concatenate([A, B[:, :3]])
    assert np.allclose(pooled.mean[:3], both.mean(0)) and np.allclose(pooled.std[:3], both.std(0))
    assert np.isclose(pooled.mean[3], B[:, 3].mean()) and np.isclose(pooled.max[3], B[:, 3].max())
    same = merge_padded([{"s": _stats(A)}, {"s": _stats(A)}])["s"]
    assert np.allclose(same.mean, merge_stats([{"s": _stats(A)}, {"s": _stats(A)}])["s"].mean)
    norm = Normalize(merge_padded([{"s": _stats(A)}, {"s": _stats(B)}]), {"s": "mean_std"})
    assert norm({"s": np.zeros((2, 4), np.float32)})["s"].shape == (2, 4)
