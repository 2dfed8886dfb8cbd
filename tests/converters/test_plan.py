"""converters/plan.py: work units are contiguous runs of episodes of about equal cost,
dispatched costliest first, and the cost-aware assignment beats round robin."""

import numpy as np
import pytest

from jaxload.converters.plan import (
    Unit,
    balance,
    dispatch_order,
    plan_document,
    plan_id,
    plan_units,
)
from tests.converters.conftest import MULTI_FILE_LENGTHS as LENGTHS


@pytest.fixture(scope="module")
def source(multi_file_v3):
    return multi_file_v3


@pytest.mark.integration
def test_small_datasets_get_a_unit_per_episode_run_costliest_first(source):
    from jaxload.converters.lerobot_v3 import LeRobotV3Source

    src = LeRobotV3Source(source)
    lengths = [src.episode(e).length for e in src.episode_ids]
    units = plan_units(src.episode_ids, lengths, pixels=48 * 64 + 40 * 72)
    assert [u.episodes for u in units] == [(e,) for e in range(len(LENGTHS))]
    assert dispatch_order(units)[:3] == [2, 5, 0]  # costliest first


@pytest.mark.integration
def test_units_are_contiguous_and_about_equal_in_cost():
    rng = np.random.default_rng(0)
    lengths = np.exp(rng.uniform(np.log(10), np.log(3000), size=500)).astype(int)
    units = plan_units(list(range(500)), lengths.tolist(), pixels=3 * 96 * 128)
    episodes = [e for u in units for e in u.episodes]
    assert episodes == list(range(500))
    costs = np.array([u.cost for u in units])
    assert 64 <= len(units) <= 128
    assert costs.max() <= 2 * np.median(costs) + 3000 * 3 * 96 * 128
    assert units[0].frames == sum(lengths[: len(units[0].episodes)])


@pytest.mark.integration
def test_cost_aware_assignment_beats_round_robin():
    rng = np.random.default_rng(1)
    costs = np.exp(rng.uniform(np.log(10), np.log(3000), size=200))
    for workers in (2, 4, 8):
        result = balance(costs, workers)
        assert result.lpt < 1.01 < result.round_robin


def test_a_unit_never_splits_an_episode_and_respects_the_cost_cap():
    # budget = min(cap, total / target) = min(100, 450): 100 frames per unit; an episode of 250
    # frames is a unit of its own (never split), the rest are cut at the budget
    units = plan_units([4, 5, 6, 7, 8], [60, 30, 250, 40, 70], pixels=1, target_units=1,
                       max_unit_cost=100, input_bytes=[1, 2, 3, 4, 5])  # fmt: skip
    assert [u.episodes for u in units] == [(4, 5), (6,), (7,), (8,)]
    assert [u.frames for u in units] == [90, 250, 40, 70]
    assert [u.input_bytes for u in units] == [3, 3, 4, 5]
    assert [u.index for u in units] == [0, 1, 2, 3]
    assert dispatch_order(units) == [1, 0, 3, 2]
    assert units[0].describe() == "unit 0 (episodes 4..5)"
    assert units[1].describe() == "unit 1 (episode 6)"


def test_units_do_not_depend_on_anything_but_the_costs():
    few = plan_units(list(range(10)), [5] * 10, pixels=0, target_units=5)
    assert [u.episodes for u in few] == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    assert few[0].cost == 10.0  # no video: frames alone


def test_balance_of_equal_units_and_more_workers_than_units():
    assert balance([1.0] * 4, 2).lpt == 1.0
    assert balance([3.0, 1.0], 8).workers == 2


def test_the_plan_id_changes_with_what_defines_the_conversion():
    units = [Unit(0, (0, 1), 5, 5.0, 0), Unit(1, (2,), 3, 3.0, 0)]
    document = plan_document({"root": "src"}, {"gop": 4}, units)
    assert document["units"] == [[0, 1], [2]]
    assert plan_id(document) == plan_id(plan_document({"root": "src"}, {"gop": 4}, units))
    assert plan_id(document) != plan_id(plan_document({"root": "src"}, {"gop": 2}, units))
    assert plan_id(document) != plan_id(plan_document({"root": "src"}, {"gop": 4}, units[:1]))
