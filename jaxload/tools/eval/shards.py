"""Balanced evaluation sharding: whole episodes to shards by cost, with per-episode seeds.

`shard_episodes` assigns every episode to exactly one of `num_shards` shards with LPT bin
packing (jaxload.balance) on its cost, frames x cameras by default, so shards finish at
about the same time (imbalance = max / mean shard cost, reported). The assignment is a
pure function of the episodes and costs: every process computes the same plan and takes
its own shard, no coordination needed.

Seeds: episode e's seed comes from `np.random.SeedSequence(base_seed, spawn_key=(e,))`,
i.e. a child of the base seed keyed by the episode id. It depends on neither the shard
count nor the shard, two episodes never share a stream (distinct spawn keys give
independent SeedSequences), and a rerun of one episode reproduces it. `seed` is that
sequence's first 64 bits as an int, for simulators that take an integer.

Example (in the evaluation script, launched by `jaxload eval-parallel`)::

    shard = shard_episodes("out/pusht", num_shards=int(os.environ["JAXLOAD_NUM_SHARDS"]),
                           shard_id=int(os.environ["JAXLOAD_SHARD_ID"]))
    for episode, seed in zip(shard.episodes, shard.seeds):
        rollout(episode, rng=np.random.default_rng(seed))
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.balance import bin_loads, lpt_assign
from jaxload.episode_dataset import as_episode_dataset, is_dataset

Cost = Callable[[int, int], float] | Sequence[float] | np.ndarray | None


@dataclasses.dataclass(frozen=True)
class EvalShard:
    """One shard of an evaluation plan."""

    shard_id: int
    num_shards: int
    episodes: np.ndarray  # episode ids of this shard, ascending
    seeds: list[int]  # 64-bit seed of each episode, aligned with `episodes`
    cost: float  # summed cost of this shard
    loads: np.ndarray  # summed cost of every shard
    base_seed: int = 0

    @property
    def imbalance(self) -> float:
        """max / mean shard cost of the whole plan (1.0 is perfect)."""
        mean = float(self.loads.mean())
        return float(self.loads.max() / mean) if mean > 0 else 1.0

    def seed_sequence(self, episode: int) -> np.random.SeedSequence:
        """The episode's SeedSequence (spawn further streams from it if needed)."""
        return episode_seed_sequence(self.base_seed, episode)


def episode_seed_sequence(base_seed: int, episode: int) -> np.random.SeedSequence:
    """Seed sequence of an episode: the child of `base_seed` keyed by the episode id."""
    return np.random.SeedSequence(int(base_seed), spawn_key=(int(episode),))


def episode_seed(base_seed: int, episode: int) -> int:
    """A 64-bit integer seed for an episode (the first 64 bits of its SeedSequence)."""
    words = episode_seed_sequence(base_seed, episode).generate_state(2, np.uint32)
    return int(words[0]) | int(words[1]) << 32


def shard_episodes(
    episodes: Any,
    num_shards: int,
    shard_id: int,
    *,
    cost: Cost = None,
    num_cameras: int | None = None,
    base_seed: int = 0,
) -> EvalShard:
    """The episodes (and their seeds) of shard `shard_id` of `num_shards`.

    `episodes`: a dataset path or JaxloadDataset (its episodes, lengths and cameras), a
    mapping episode id -> length in frames, or a sequence of lengths (ids 0..n-1).
    `cost`: None for length x max(1, cameras); a callable (episode, length) -> cost; or a
    sequence of costs in the episodes' order (ascending id for a dataset or mapping).
    """
    plan = plan_shards(
        episodes, num_shards, cost=cost, num_cameras=num_cameras, base_seed=base_seed
    )
    if not 0 <= shard_id < num_shards:
        raise ValueError(f"shard_id {shard_id} is not in 0..{num_shards - 1}")
    return plan[shard_id]


def plan_shards(
    episodes: Any,
    num_shards: int,
    *,
    cost: Cost = None,
    num_cameras: int | None = None,
    base_seed: int = 0,
) -> list[EvalShard]:
    """Every shard of the plan (see `shard_episodes`); disjoint, and together all episodes."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    ids, lengths, cameras = _episode_table(episodes)
    cameras = cameras if num_cameras is None else int(num_cameras)
    costs = _costs(ids, lengths, cameras, cost)
    assignment = lpt_assign(costs, num_shards)
    loads = bin_loads(costs, assignment, num_shards)
    shards = []
    for s in range(num_shards):
        mine = np.sort(ids[assignment == s])
        shards.append(
            EvalShard(
                shard_id=s,
                num_shards=num_shards,
                episodes=mine,
                seeds=[episode_seed(base_seed, e) for e in mine],
                cost=float(loads[s]),
                loads=loads,
                base_seed=int(base_seed),
            )
        )
    return shards


def _episode_table(episodes: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """(ids ascending, lengths, camera count) from any accepted `episodes` form."""
    if isinstance(episodes, str | os.PathLike) or is_dataset(episodes):
        if isinstance(episodes, str | os.PathLike):
            from jaxload.dataset import JaxloadDataset

            ds = JaxloadDataset(episodes)
        else:
            ds = as_episode_dataset(episodes)
        ids, lengths, cameras = ds.episode_index, ds.episode_lengths, len(ds.camera_keys)
    elif isinstance(episodes, Mapping):
        ids = np.fromiter(episodes.keys(), dtype=np.int64, count=len(episodes))
        lengths, cameras = np.fromiter(episodes.values(), dtype=np.int64, count=len(episodes)), 1
    else:
        lengths, cameras = np.asarray(list(episodes), dtype=np.int64), 1
        ids = np.arange(len(lengths), dtype=np.int64)
    ids, lengths = np.asarray(ids, np.int64), np.asarray(lengths, np.int64)
    if len(np.unique(ids)) != len(ids):
        raise ValueError("episode ids must be unique")
    if (lengths < 0).any():
        raise ValueError("episode lengths must be >= 0")
    order = np.argsort(ids, kind="stable")
    return ids[order], lengths[order], int(cameras)


def _costs(ids: np.ndarray, lengths: np.ndarray, cameras: int, cost: Cost) -> np.ndarray:
    if cost is None:
        return lengths.astype(np.float64) * max(1, cameras)
    if callable(cost):
        return np.array([float(cost(int(e), int(n))) for e, n in zip(ids, lengths)])
    costs = np.asarray(cost, dtype=np.float64)
    if costs.shape != ids.shape:
        raise ValueError(f"cost has {costs.size} values for {ids.size} episodes")
    return costs


def merge_results(results: Sequence[Any], *, where: str = "results") -> Any:
    """One JSON value from the shards' JSON values (in shard order).

    Lists are concatenated; objects are merged key by key with these same rules (a key
    only some shards have is merged over those); any other value (numbers, strings, null)
    becomes the list of the shards' values. A list in one shard and an object in another
    is an error.

    >>> merge_results([{"episodes": [0, 3], "sr": 0.5}, {"episodes": [1, 2], "sr": 1.0}])
    {'episodes': [0, 3, 1, 2], 'sr': [0.5, 1.0]}
    """
    kinds = {
        "list" if isinstance(r, list) else "object" if isinstance(r, dict) else "value"
        for r in results
    }
    if kinds == {"list"}:
        return [item for r in results for item in r]
    if kinds == {"object"}:
        keys = dict.fromkeys(k for r in results for k in r)
        return {
            k: merge_results([r[k] for r in results if k in r], where=f"{where}.{k}") for k in keys
        }
    if kinds == {"value"}:
        return list(results)
    raise ValueError(f"{where}: shards disagree on the type ({' vs '.join(sorted(kinds))})")
