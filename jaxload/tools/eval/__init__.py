"""Parallel evaluation: episodes split into balanced shards with per-episode seeds
(`shards`), and `jaxload eval-parallel`, which runs a command once per shard and merges
their JSON results (`launcher`).

    from jaxload.tools.eval import shard_episodes
    mine = shard_episodes([120, 80, 200, 95], num_shards=2, shard_id=0, base_seed=0)
"""

from jaxload.tools.eval.shards import (
    EvalShard,
    episode_seed,
    episode_seed_sequence,
    merge_results,
    plan_shards,
    shard_episodes,
)

__all__ = [
    "EvalShard",
    "episode_seed",
    "episode_seed_sequence",
    "merge_results",
    "plan_shards",
    "shard_episodes",
]
