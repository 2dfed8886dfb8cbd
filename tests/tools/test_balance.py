import numpy as np
import pytest

from jaxload.balance import imbalance, lpt_assign


def _lengths(n=200, seed=0):
    return np.random.default_rng(seed).integers(10, 3001, size=n)


@pytest.mark.parametrize("bins", [4, 8])
def test_lpt_balances_mixed_episode_lengths(bins):
    costs = _lengths()
    assignment = lpt_assign(costs, bins)
    assert imbalance(costs, assignment, bins) <= 1.05
    contiguous = np.arange(len(costs)) * bins // len(costs)
    round_robin = np.arange(len(costs)) % bins
    # LPT beats the naive splits on the same costs.
    assert imbalance(costs, assignment, bins) < imbalance(costs, contiguous, bins)
    assert imbalance(costs, assignment, bins) < imbalance(costs, round_robin, bins)


def test_every_unit_gets_exactly_one_bin_deterministically():
    costs = _lengths(57, seed=3)
    a = lpt_assign(costs, 5)
    assert a.shape == (57,) and set(a) <= set(range(5))
    np.testing.assert_array_equal(a, lpt_assign(costs, 5))


def test_more_bins_than_units_and_zero_costs():
    assert sorted(lpt_assign([3, 1], 4).tolist()) == [0, 1]
    assert lpt_assign([0, 0, 0], 2).tolist() == [0, 1, 0]
    with pytest.raises(ValueError):
        lpt_assign([1], 0)
