"""Planning a conversion: episodes into work units, units in dispatch order.

A unit is a run of consecutive episodes (consecutive, because LeRobot v3.0 packs
neighbouring episodes into shared data and video files, so a unit reads each file it
needs once). Units are cut from the episodes' costs alone (frames x cameras x pixels),
never from the worker count or the engine, so a resumed run, a different --workers or
--engine ray finds exactly the same units. The cut aims at about TARGET_UNITS units of
equal cost, each at most MAX_UNIT_COST, and never splits an episode.

Units run longest first (LPT list scheduling): an idle worker takes the costliest unit
left, so the run ends on small units and no worker straggles. `balance` reports the
expected imbalance (max / mean of per-worker cost) of that order against round-robin.

Example:
    >>> units = plan_units([0, 1, 2], lengths=[3000, 10, 40], pixels=96 * 128)
    >>> [u.episodes for u in units], dispatch_order(units)
    ([(0,), (1,), (2,)], [0, 2, 1])
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxload.balance import imbalance, lpt_assign

PLAN_SCHEMA = 1
# Enough units that any local pool, and a small cluster, has work for every worker...
TARGET_UNITS = 64
# ...and none so large that a crash loses much: about a minute or two of one core's
# transcoding (1e9 pixel-frames = 1,100 frames of 3 cameras at 480x640).
MAX_UNIT_COST = 1e9


@dataclasses.dataclass(frozen=True)
class Unit:
    """A run of consecutive episodes converted together into one part file."""

    index: int
    episodes: tuple[int, ...]
    frames: int
    cost: float
    input_bytes: int

    def describe(self) -> str:
        first, last = self.episodes[0], self.episodes[-1]
        span = f"episode {first}" if first == last else f"episodes {first}..{last}"
        return f"unit {self.index} ({span})"


def episode_cost(length: int, pixels: int) -> float:
    """frames x cameras x pixels (the camera pixels summed); frames alone without video."""
    return float(length) * float(max(pixels, 1))


def plan_units(
    episodes: Sequence[int],
    lengths: Sequence[int],
    pixels: int,
    input_bytes: Sequence[int] | None = None,
    *,
    target_units: int = TARGET_UNITS,
    max_unit_cost: float = MAX_UNIT_COST,
) -> list[Unit]:
    """Cuts the episodes, in order, into units of about equal cost."""
    costs = [episode_cost(n, pixels) for n in lengths]
    sizes = list(input_bytes) if input_bytes is not None else [0] * len(costs)
    budget = min(max_unit_cost, sum(costs) / max(target_units, 1))
    groups: list[list[int]] = []
    load = 0.0
    for i, cost in enumerate(costs):
        if not groups or (load > 0 and load + cost > budget):
            groups.append([])
            load = 0.0
        groups[-1].append(i)
        load += cost
    return [
        Unit(
            index=u,
            episodes=tuple(int(episodes[i]) for i in group),
            frames=int(sum(lengths[i] for i in group)),
            cost=float(sum(costs[i] for i in group)),
            input_bytes=int(sum(sizes[i] for i in group)),
        )
        for u, group in enumerate(groups)
    ]


def dispatch_order(units: Sequence[Unit]) -> list[int]:
    """Unit indices, costliest first (ties in unit order): LPT list scheduling."""
    return [u.index for u in sorted(units, key=lambda u: (-u.cost, u.index))]


@dataclasses.dataclass(frozen=True)
class Balance:
    """Expected max / mean of per-worker cost for a unit order and a worker count."""

    workers: int
    lpt: float
    round_robin: float


def balance(costs: Sequence[float], workers: int) -> Balance:
    """LPT against handing units out round-robin in unit order."""
    costs = np.asarray(costs, dtype=np.float64)
    workers = max(1, min(workers, len(costs)))
    rr = np.arange(len(costs)) % workers
    return Balance(
        workers,
        imbalance(costs, lpt_assign(costs, workers), workers),
        imbalance(costs, rr, workers),
    )


def plan_document(
    source_identity: dict[str, Any],
    options: dict[str, Any],
    units: Sequence[Unit],
) -> dict[str, Any]:
    """What defines a conversion: source, options and units. A rerun resumes only when
    it computes the same document."""
    return {
        "schema": PLAN_SCHEMA,
        "source": source_identity,
        "options": options,
        "units": [list(u.episodes) for u in units],
    }


def plan_id(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
