"""Normalize: per-key z-score / quantile scaling in the loader pipeline, and its inverse."""

import json
import pickle
import shutil

import grain
import jax.numpy as jnp
import numpy as np
import pytest

import jaxload
import jaxload.stats as S
from jaxload.pipeline.make_loader import make_loader
from jaxload.transforms import Normalize
from tests.support.helpers import converted

MODES = {"observation.state": "mean_std", "action": "quantile", "observation.image": "mean_std"}


@pytest.fixture(scope="module")
def dataset(shared_lerobot, tmp_path_factory):
    """h264_single converted, with its stats written (image stats copied from LeRobot)."""
    root = tmp_path_factory.mktemp("norm") / "ds"
    shutil.copytree(converted(tmp_path_factory, shared_lerobot / "h264_single"), root)
    S.write_stats(root, shared_lerobot / "h264_single" / "meta" / "stats.json")
    return root


def test_normalizes_a_sample_with_lerobots_formulas(dataset):
    stats = S.load_stats(dataset)
    norm = Normalize(stats, MODES)
    sample = jaxload.open(dataset)[5]
    out = norm(sample)
    state, action = stats["observation.state"], stats["action"]
    np.testing.assert_allclose(
        out["observation.state"],
        (sample["observation.state"] - state.mean) / (state.std + 1e-8),
        rtol=1e-5,
        atol=1e-5,
    )
    lo, hi = action.quantiles["q01"], action.quantiles["q99"]
    np.testing.assert_allclose(
        out["action"], 2 * (sample["action"] - lo) / (hi - lo + 1e-8) - 1, rtol=1e-5, atol=1e-5
    )
    # Images: uint8 HWC -> [0, 1], then per channel with LeRobot's (3, 1, 1) image stats.
    image = stats["observation.image"]
    expected = (sample["observation.image"] / 255.0 - image.mean.reshape(3)) / (
        image.std.reshape(3) + 1e-8
    )
    assert out["observation.image"].shape == sample["observation.image"].shape
    np.testing.assert_allclose(out["observation.image"], expected, rtol=1e-4, atol=1e-3)
    assert all(out[k].dtype == np.float32 for k in MODES)
    assert out["episode_index"] == sample["episode_index"] and out["task"] == sample["task"]
    assert sample["observation.state"].dtype == np.float32  # input left untouched


def test_quantile_mode_maps_q01_q99_to_minus_one_one_and_unnormalize_inverts(dataset):
    stats = S.load_stats(dataset)
    norm = Normalize(stats, {"action": "quantile", "observation.state": "min_max"})
    a = stats["action"]
    ends = norm({"action": np.stack([a.quantiles["q01"], a.quantiles["q99"]]).astype(np.float32)})
    np.testing.assert_allclose(ends["action"], [[-1] * 4, [1] * 4], atol=1e-5)
    s = stats["observation.state"]
    ends = norm({"observation.state": np.stack([s.min, s.max]).astype(np.float32)})
    np.testing.assert_allclose(ends["observation.state"], [[-1] * 4, [1] * 4], atol=1e-5)

    ds = jaxload.open(dataset, delta_timestamps={"action": [k / 10 for k in range(16)]})
    batch = {"action": np.stack([s["action"] for s in ds.__getitems__(range(0, 200, 25))])}
    back = norm.unnormalize(norm(batch), keys=["action"])
    # float32 round trip: action[0] is ~5e4 (an id), so its spacing is ~4e-3.
    np.testing.assert_allclose(back["action"], batch["action"], rtol=2e-7, atol=1e-5)
    # A policy's output as a jax.Array stays one.
    predicted = jnp.zeros((2, 16, 4))
    restored = norm.unnormalize({"action": predicted})["action"]
    assert isinstance(restored, type(predicted))
    center = (a.quantiles["q01"] + a.quantiles["q99"]) / 2
    np.testing.assert_allclose(np.asarray(restored)[0, 0], center, rtol=1e-5, atol=1e-3)


def test_in_the_loader_as_batch_transform_and_as_a_grain_map(dataset):
    norm = Normalize.from_datasets(dataset, MODES)
    assert pickle.loads(pickle.dumps(norm)).modes == norm.modes  # travels to Grain workers
    kw = dict(global_batch_size=8, shuffle=False, options=jaxload.PipelineOptions(num_workers=0))
    kw["delta_timestamps"] = {"action": [0.0, 0.1, 0.2]}
    loader = make_loader(dataset, batch_transform=norm, **kw)
    raw = make_loader(dataset, **kw)
    with loader, raw:
        batch, plain = next(loader), next(raw)
    assert batch["action"].shape == plain["action"].shape == (8, 3, 4)
    np.testing.assert_allclose(batch["action"], norm(plain)["action"], rtol=1e-6)
    assert batch["observation.image"].dtype == np.float32

    samples = grain.MapDataset.source(jaxload.open(dataset)).map(norm)
    np.testing.assert_allclose(
        samples[3]["observation.state"], norm(jaxload.open(dataset)[3])["observation.state"]
    )


def test_mixture_padded_dims_pass_through_unchanged(dataset):
    norm = Normalize(S.load_stats(dataset), {"observation.state": "mean_std"})
    padded = np.zeros((2, 6), np.float32)  # state (4,) zero-padded to 6 by a mixture
    padded[:, :4] = 1.0
    out = norm({"observation.state": padded})["observation.state"]
    assert out.shape == (2, 6)
    np.testing.assert_array_equal(out[:, 4:], 0.0)
    with pytest.raises(ValueError, match="last axis"):
        norm({"observation.state": np.zeros((2, 3), np.float32)})


def test_accepts_lerobot_stats_json_and_rejects_bad_configuration(shared_lerobot):
    raw = json.loads((shared_lerobot / "h264_single" / "meta" / "stats.json").read_text())
    norm = Normalize(raw, {"action": "quantile"})  # LeRobot's own dict works as is
    assert norm({"action": np.zeros(4, np.float32)})["action"].shape == (4,)
    assert norm({"timestamp": np.float32(1)}) == {"timestamp": np.float32(1)}  # other keys kept
    with pytest.raises(ValueError, match="mode 'zscore'"):
        Normalize(raw, {"action": "zscore"})
    with pytest.raises(KeyError, match="no stats for 'nope'"):
        Normalize(raw, {"nope": "mean_std"})
    scalar = Normalize(raw, {"timestamp": "mean_std"})({"timestamp": np.float32(2.5)})
    assert np.shape(scalar["timestamp"]) == ()  # (1,)-shaped stats keep a scalar a scalar
