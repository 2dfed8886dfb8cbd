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
