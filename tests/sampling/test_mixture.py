"""Weighted mixtures (exact, history-free schedule) and the shared batch schema."""

import numpy as np
import pytest

from jaxload.batch.schema import BatchSchema
from jaxload.sampling.mixture import MixtureSchedule, choose_block_size, quotas


def test_each_dataset_sees_its_own_stream_in_full():
    mix = MixtureSchedule([3, 1, 1], seed=2, block_size=50)
    dataset, stream_pos = mix.locate(np.arange(50 * 7))
    for d, quota in enumerate([30, 10, 10]):
        assert np.array_equal(np.sort(stream_pos[dataset == d]), np.arange(7 * quota))


def test_mixture_is_a_pure_function_of_position():
    mix = MixtureSchedule([0.2, 0.5, 0.3], seed=9, block_size=97)
    whole = mix.locate(np.arange(1000))
    shuffled = np.random.default_rng(0).permutation(1000)
    parts = mix.locate(shuffled)
    for a, b in zip(whole, parts, strict=True):
        assert np.array_equal(a[shuffled], b)


def test_slots_are_shuffled_evenly_within_blocks():
    dataset, _ = MixtureSchedule([0.7, 0.3], seed=0).locate(np.arange(10 * 5000))
    per_slot = (dataset.reshape(5000, 10) == 0).mean(axis=0)
    assert np.abs(per_slot - 0.7).max() < 0.03  # no slot of a block is biased to a dataset


def test_seeds_change_the_interleaving():
    a = MixtureSchedule([1, 1], seed=0).locate(np.arange(200))[0]
    b = MixtureSchedule([1, 1], seed=1).locate(np.arange(200))[0]
    assert not np.array_equal(a, b)


def test_unshuffled_mixture_is_evenly_spread():
    dataset, stream_pos = MixtureSchedule([0.75, 0.25], shuffle=False, block_size=8).locate(
        np.arange(16)
    )
    assert dataset.tolist() == [0, 0, 1, 0, 0, 0, 1, 0] * 2
    assert stream_pos[dataset == 0].tolist() == list(range(12))


def test_quotas_round_by_largest_remainder():
    assert quotas([1, 1, 1], 10).tolist() == [4, 3, 3]
    assert quotas([0.7, 0.3], 10_000).tolist() == [7000, 3000]
    assert quotas([1, 0, 2], 7).tolist() == [2, 0, 5]
    with pytest.raises(ValueError, match="too small"):
        quotas([1, 1e-6], 1000)
    with pytest.raises(ValueError, match="non-negative"):
        quotas([1, -1], 10)


def test_block_size_is_the_smallest_exact_one():
    assert choose_block_size([0.7, 0.3]) == 10
    assert choose_block_size([1, 1, 1]) == 3
    assert choose_block_size([2390, 209]) <= 1000
    block = choose_block_size([1, 1e-4])
    assert quotas([1, 1e-4], block)[1] == 1
    # Every window of one block has the exact composition.
    dataset, _ = MixtureSchedule([0.7, 0.3], seed=3).locate(np.arange(1000))
    assert (dataset.reshape(100, 10).sum(axis=1) == 3).all()


def _spec(state=4, cams=(("top", (6, 8, 3)),), window=None):
    spec = {
        "observation.state": ((state,), np.dtype(np.float32)),
        "index": ((), np.dtype(np.int64)),
    }
    for name, shape in cams:
        spec[name] = ((window, *shape) if window else shape, np.dtype(np.uint8))
        if window:
            spec[f"{name}_is_pad"] = ((window,), np.dtype(bool))
    return spec


def _sample(spec, value):
    s = {k: np.full(shape, value, dtype) for k, (shape, dtype) in spec.items()}
    for k in s:
        if k.endswith("_is_pad"):
            s[k][:] = False
    s["task"] = f"task {value}"
    return s


def test_schema_pads_missing_cameras_and_state_sizes():
    a = _spec(state=4, cams=(("top", (6, 8, 3)),))
    b = _spec(state=7, cams=(("top", (6, 8, 3)), ("wrist", (4, 4, 3))))
    schema = BatchSchema([a, b])
    spec = schema.element_spec
    assert spec["observation.state"] == ((7,), np.dtype(np.float32))
    assert spec["observation.state_dim_is_pad"] == ((7,), np.dtype(bool))
    assert spec["wrist"] == ((4, 4, 3), np.dtype(np.uint8))
    assert spec["wrist_is_pad"] == ((), np.dtype(bool))
    assert "top_is_pad" not in spec
    batch = schema.collate([_sample(a, 1), _sample(b, 2), _sample(a, 3)], np.array([0, 1, 0]))
    assert batch["dataset_index"].tolist() == [0, 1, 0]
    assert batch["wrist_is_pad"].tolist() == [True, False, True]
    assert not batch["wrist"][0].any() and (batch["wrist"][1] == 2).all()
    assert batch["observation.state"][0].tolist() == [1, 1, 1, 1, 0, 0, 0]
    assert batch["observation.state_dim_is_pad"][0].tolist() == [False] * 4 + [True] * 3
    assert not batch["observation.state_dim_is_pad"][1].any()
    assert batch["task"].tolist() == ["task 1", "task 2", "task 3"]


def test_schema_windowed_missing_camera_is_all_pad():
    a = _spec(cams=(("top", (6, 8, 3)),), window=2)
    b = _spec(cams=(("top", (6, 8, 3)), ("wrist", (4, 4, 3))), window=2)
    schema = BatchSchema([a, b])
    assert schema.element_spec["wrist_is_pad"] == ((2,), np.dtype(bool))
    batch = schema.collate([_sample(a, 1), _sample(b, 2)], np.array([0, 1]))
    assert batch["wrist_is_pad"].tolist() == [[True, True], [False, False]]


def test_schema_refuses_what_cannot_share_a_batch_and_key_maps_fix_it():
    a = _spec(cams=(("cam", (6, 8, 3)),))
    b = _spec(cams=(("cam", (4, 4, 3)),))
    with pytest.raises(ValueError, match="'cam' has shapes that cannot share a batch"):
        BatchSchema([a, b])
    schema = BatchSchema([a, b], key_maps=[{}, {"cam": "cam_small"}])
    assert set(schema.element_spec) >= {"cam", "cam_small", "cam_is_pad", "cam_small_is_pad"}
    batch = schema.collate([_sample(b, 5)], np.array([1]))
    assert (batch["cam_small"] == 5).all() and batch["cam_is_pad"].tolist() == [True]
