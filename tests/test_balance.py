"""Cost-aware assignment of work units to bins (jaxload.balance): LPT's order and
tie-breaking, the loads and the imbalance it reports, and the inputs it refuses.
(Balance on mixed episode lengths against naive splits: tests/tools/test_balance.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from jaxload.balance import bin_loads, imbalance, lpt_assign


def test_the_largest_unit_goes_to_the_lightest_bin_first():
    assert lpt_assign([5, 4, 3, 3, 3], 2).tolist() == [0, 1, 1, 0, 1]  # loads 8 and 10
    assert bin_loads([5, 4, 3, 3, 3], [0, 1, 1, 0, 1], 2).tolist() == [8.0, 10.0]


def test_ties_go_in_index_order_to_the_bin_with_fewer_units_then_the_lower_index():
    assert lpt_assign([1, 1, 1, 1], 2).tolist() == [0, 1, 0, 1]
    # bin 0 gets the 2, bin 1 the two 1s: loads tie at 2, bin 0 has fewer units
    assert lpt_assign([2, 1, 1, 1], 2).tolist() == [0, 1, 1, 0]
    assert lpt_assign([0, 0, 0], 2).tolist() == [0, 1, 0]


def test_loads_and_imbalance_of_an_assignment():
    costs = [4.0, 2.0, 2.0]
    assert imbalance(costs, [0, 1, 1], 2) == 1.0
    assert imbalance(costs, [0, 0, 1], 2) == pytest.approx(6 / 4)
    assert bin_loads(costs, [0, 0, 0], 3).tolist() == [8.0, 0.0, 0.0]
    assert imbalance([0, 0], [0, 1], 2) == 1.0  # nothing to balance
    assert lpt_assign([], 3).tolist() == []


def test_no_bins_or_a_negative_cost_is_refused():
    with pytest.raises(ValueError, match="num_bins must be >= 1, got 0"):
        lpt_assign([1], 0)
    with pytest.raises(ValueError, match="non-negative"):
        lpt_assign(np.array([1.0, -0.5]), 2)
