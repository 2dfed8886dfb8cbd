"""Balanced evaluation sharding (jaxload.tools.eval.shards): LPT shards by cost, per-episode
seeds, and merging the shards' JSON results."""

import numpy as np
import pytest

from jaxload.balance import imbalance
from jaxload.converters.convert import convert
from jaxload.tools.eval.shards import episode_seed, merge_results, plan_shards, shard_episodes


def _episode_lengths() -> np.ndarray:
    """200 episodes of 10..3000 frames, as recorded: 8 tasks in rotation (each with its own
    typical length, geometric from 10 to 750 frames), and a second session whose episodes
    are 4x longer. Round robin then gives one shard the same task over and over, and a
    contiguous split gives the late shards the long session."""
    i = np.arange(200)
    base = np.geomspace(10, 750, 8)[i % 8]
    session = np.where(i < 100, 1.0, 4.0)
    noise = np.random.default_rng(0).uniform(0.85, 1.15, len(i))
    return np.clip(np.rint(base * session * noise), 10, 3000).astype(np.int64)


@pytest.mark.parametrize("shards", [4, 8])
def test_lpt_shards_are_balanced_where_naive_splits_are_not(shards):
    lengths = _episode_lengths()
    assert lengths.min() == 10 and lengths.max() == 3000
    plan = plan_shards(lengths, shards)
    assert plan[0].imbalance <= 1.05
    i = np.arange(len(lengths))
    contiguous, round_robin = i * shards // len(i), i % shards
    assert imbalance(lengths, contiguous, shards) >= 1.5
    assert imbalance(lengths, round_robin, shards) >= 1.5
    # Disjoint and complete, each shard's own call agrees with the plan.
    episodes = [shard_episodes(lengths, shards, s).episodes for s in range(shards)]
    union = np.concatenate(episodes)
    assert sorted(union.tolist()) == list(range(len(lengths)))
    assignment = np.empty(len(lengths), dtype=np.int64)
    for s, mine in enumerate(episodes):
        np.testing.assert_array_equal(mine, plan[s].episodes)
        assert plan[s].cost == lengths[mine].sum()
        assignment[mine] = s
    assert imbalance(lengths, assignment, shards) == plan[0].imbalance


def test_balanced_on_random_lengths_too():
    lengths = np.random.default_rng(1).integers(10, 3001, size=200)
    for shards in (4, 8):
        assert plan_shards(lengths, shards)[0].imbalance <= 1.05


def test_seeds_are_per_episode_distinct_and_independent_of_the_sharding():
    lengths = dict(zip(range(100, 300), _episode_lengths()))  # episode ids 100..299
    seeds = {}
    for shards in (1, 3, 8):
        for shard in plan_shards(lengths, shards, base_seed=7):
            for episode, seed in zip(shard.episodes, shard.seeds):
                assert seeds.setdefault(int(episode), seed) == seed
    assert len(seeds) == 200 and len(set(seeds.values())) == 200
    assert seeds[150] == episode_seed(7, 150) != episode_seed(8, 150)
    shard = shard_episodes(lengths, 3, 1, base_seed=7)
    a = np.random.default_rng(shard.seed_sequence(int(shard.episodes[0]))).random(3)
    b = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(int(shard.episodes[0]),)))
    np.testing.assert_array_equal(a, b.random(3))


def test_costs_default_to_frames_times_cameras_and_can_be_given(shared_lerobot, tmp_path):
    root = tmp_path / "ds"
    convert(shared_lerobot / "h264_single", root, episodes="0-3", workers=1, progress=False)
    plan = plan_shards(root, 2)  # a dataset path: its episodes, lengths and 1 camera
    assert sorted(np.concatenate([p.episodes for p in plan]).tolist()) == [0, 1, 2, 3]
    assert sum(p.cost for p in plan) == 23 + 5 + 70 + 41
    weighted = plan_shards({0: 10, 1: 10, 2: 10}, 2, cost=lambda e, n: n * (e + 1))
    assert sorted(p.cost for p in weighted) == [30.0, 30.0]  # costs 10, 20, 30: {30} {10, 20}
    assert plan_shards([5, 5], 2, cost=[1.0, 9.0])[0].cost in (1.0, 9.0)
    with pytest.raises(ValueError, match="shard_id 2"):
        shard_episodes([1, 2], 2, 2)
    with pytest.raises(ValueError, match="cost has 1 values for 2"):
        plan_shards([1, 2], 2, cost=[1.0])


def test_merge_results_rules():
    merged = merge_results(
        [
            {"episodes": [0, 3], "success": [1, 0], "sr": 0.5, "cfg": {"policy": "a"}},
            {"episodes": [1], "success": [1], "sr": 1.0, "cfg": {"policy": "a"}, "extra": [9]},
        ]
    )
    assert merged == {
        "episodes": [0, 3, 1],
        "success": [1, 0, 1],
        "sr": [0.5, 1.0],
        "cfg": {"policy": ["a", "a"]},
        "extra": [9],
    }
    assert merge_results([[1], [2, 3]]) == [1, 2, 3]
    with pytest.raises(ValueError, match=r"results\.x: shards disagree"):
        merge_results([{"x": [1]}, {"x": {"a": 1}}])


def test_episode_tables_that_cannot_be_planned_are_refused():
    with pytest.raises(ValueError, match="num_shards must be >= 1, got 0"):
        plan_shards([1, 2], 0)
    with pytest.raises(ValueError, match=r"shard_id -1 is not in 0\.\.1"):
        shard_episodes([1, 2], 2, -1)
    with pytest.raises(ValueError, match="episode lengths must be >= 0"):
        plan_shards({0: 5, 1: -1}, 2)
    # a mapping's ids in any order: shards list them ascending, costs in that order
    plan = plan_shards({9: 1, 2: 5, 5: 3}, 1, cost=[10.0, 20.0, 30.0])
    assert plan[0].episodes.tolist() == [2, 5, 9] and plan[0].cost == 60.0
    assert plan_shards({9: 1, 2: 5, 5: 3}, 3)[0].loads.tolist() == [5.0, 3.0, 1.0]
    alone = plan_shards({9: 1, 2: 5, 5: 3}, 3, cost=[10.0, 20.0, 30.0])  # costs of 2, 5, 9
    assert {int(s.episodes[0]): s.cost for s in alone} == {2: 10.0, 5: 20.0, 9: 30.0}
    empty = plan_shards([], 2)
    assert [s.episodes.tolist() for s in empty] == [[], []] and empty[0].imbalance == 1.0
