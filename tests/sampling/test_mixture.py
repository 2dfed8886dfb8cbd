"""Weighted mixtures (exact, history-free schedule)."""

import numpy as np
import pytest

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
