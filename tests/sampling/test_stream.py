"""The global sample stream (jaxload.sampling.stream): global position -> (dataset,
position in it), one dataset or a weighted mixture."""

import numpy as np
import pytest

from jaxload.sampling.stream import SampleStream


def test_shares_match_weights_over_1e5_samples_deterministically():
    stream = SampleStream([[1000] * 3, [500] * 7], weights=[0.7, 0.3], seed=4)
    positions = np.arange(10**5)
    first = stream.locate(positions)
    again = SampleStream([[1000] * 3, [500] * 7], weights=[0.7, 0.3], seed=4).locate(positions)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    shares = np.bincount(first[0], minlength=2) / positions.size
    assert np.abs(shares - [0.7, 0.3]).max() < 0.01
    # Also on any window, not only on the whole: the schedule is stratified per block.
    window = np.bincount(first[0][12_345:32_345], minlength=2) / 20_000
    assert np.abs(window - [0.7, 0.3]).max() < 0.01


def test_stream_epoch_and_default_weights():
    stream = SampleStream([[10, 10], [5]], seed=0)  # default: proportional to anchors
    assert stream.epoch_size == 25
    assert stream.mixture.quota.tolist() == [4, 1]
    with pytest.raises(ValueError, match="dataset 0 has no valid anchors"):
        SampleStream([[3], [10]], weights=[1, 1], drop_n_last_frames=3)
    with pytest.raises(ValueError, match="dataset 0 has no valid anchors"):
        SampleStream([[3, 2]], drop_n_last_frames=3)


def test_one_dataset_is_its_own_epoch_order():
    stream = SampleStream([[4, 6]], seed=3)
    assert stream.mixture is None and stream.epoch_size == 10
    datasets, positions = stream.locate(np.arange(25))
    assert datasets.tolist() == [0] * 25
    np.testing.assert_array_equal(positions, stream.orders[0].positions(np.arange(25)))
    assert sorted(positions[:10].tolist()) == list(range(10))  # each sample once an epoch


def test_a_mixture_maps_each_dataset_through_its_own_order():
    stream = SampleStream([[4, 6], [8]], weights=[1, 1], seed=3, mixture_block_size=2)
    datasets, positions = stream.locate(np.arange(40))
    assert datasets.dtype == positions.dtype == np.int64
    mix_datasets, stream_positions = stream.mixture.locate(np.arange(40))
    np.testing.assert_array_equal(datasets, mix_datasets)
    for d in (0, 1):
        mask = datasets == d
        want = stream.orders[d].positions(stream_positions[mask])
        np.testing.assert_array_equal(positions[mask], want)
    # The orders differ per dataset even with one seed: each has its own stream id.
    same = SampleStream([[8], [8]], weights=[1, 1], seed=3, mixture_block_size=2)
    assert not np.array_equal(same.orders[0].positions(np.arange(8)),
                              same.orders[1].positions(np.arange(8)))  # fmt: skip


def test_stream_arguments_are_checked():
    with pytest.raises(ValueError, match="need at least one dataset"):
        SampleStream([])
    with pytest.raises(ValueError, match="3 weights for 2 datasets"):
        SampleStream([[5], [5]], weights=[1, 1, 1])
    # A dataset with no anchors but weight 0 is never read: allowed.
    stream = SampleStream([[3], [10]], weights=[0, 1], drop_n_last_frames=3)
    assert stream.mixture.quota.tolist() == [0, 1]
    assert set(stream.locate(np.arange(20))[0].tolist()) == {1}


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("weights", [None, [1.0, 2.0]])
def test_positions_of_any_shape_locate_as_their_flat_values(shuffle, weights):
    lengths = [[5, 7, 3]] if weights is None else [[5, 7, 3], [4, 4]]
    stream = SampleStream(lengths, weights=weights, seed=3, shuffle=shuffle)
    positions = np.arange(24).reshape(4, 6)
    flat = stream.locate(positions.reshape(-1))
    shaped = stream.locate(positions)
    for got, expected in zip(shaped, flat, strict=True):
        assert got.shape == (4, 6)
        assert np.array_equal(got, expected.reshape(4, 6))
