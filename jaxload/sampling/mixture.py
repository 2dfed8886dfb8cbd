"""Weighted mixtures: which dataset, and which of its stream positions, sits at a global position.

The global stream is cut into blocks of ``block_size`` positions. Every block holds exactly
``quota[d]`` samples of dataset ``d`` (quotas are the weights rounded by largest remainder;
by default the block is the smallest one that represents every weight within 0.1%, e.g.
10 for weights 0.7/0.3, so shares are exact over every block, not only on average). Inside block ``j`` a keyed permutation of
the block's slots (keyed by ``(seed, j)``) decides which slot gets which dataset:

    slot o of block j -> q = perm_j(o); dataset d with cum_quota[d] <= q < cum_quota[d+1];
    that dataset's stream position m = j * quota[d] + (q - cum_quota[d]).

So the sample at global position ``p`` is a pure function of ``(seed, p)``: no cursors, no
history, which keeps resume and host splitting trivial. Over blocks ``0..J-1`` dataset
``d`` receives exactly its stream positions ``[0, J * quota[d])``; its stream runs through
its own epochs (see ``EpochOrder``), so an up-weighted dataset repeats before a
down-weighted one finishes. With ``shuffle=False`` the slots are spread evenly (each
dataset's k-th slot at its ideal fractional time) instead of permuted.

    mix = MixtureSchedule(weights=[0.7, 0.3], seed=0)
    datasets, stream_positions = mix.locate(np.arange(10))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxload.sampling.permutation import KeyedPermutation, round_keys, stream_key

DEFAULT_BLOCK_SIZE = None  # automatic: see choose_block_size
SHARE_TOLERANCE = 1e-3
MAX_BLOCK_SIZE = 100_000
# Mixture keys come from a stream id no single dataset uses (datasets use 0, 1, 2, ...).
_MIXTURE_STREAM = -1


class StarvedDatasets(ValueError):
    """Datasets (`.datasets`, indices) whose positive weight rounds to no slot of a block."""

    def __init__(self, message: str, datasets: Sequence[int]):
        super().__init__(message)
        self.datasets = list(datasets)


def normalized(weights: Sequence[float]) -> np.ndarray:
    """Non-negative weights (some positive) scaled to sum to 1, also where their sum
    overflows float64: [1e308, 1e308] is 1:1 (dividing by the sum made every weight 0)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.max()
    return w / w.sum()


def quotas(weights: Sequence[float], block_size: int) -> np.ndarray:
    """Integer slots per dataset summing to block_size, by the largest-remainder method."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.max() <= 0:
        raise ValueError(
            f"weights must be non-negative finite numbers with a positive sum, got {weights}"
        )
    ideal = normalized(w) * block_size
    q = np.floor(ideal).astype(np.int64)
    # Ties go to the lower dataset index (stable sort), so quotas are deterministic.
    order = np.argsort(-(ideal - q), kind="stable")
    q[order[: block_size - int(q.sum())]] += 1
    starved = np.flatnonzero((w > 0) & (q == 0))
    if starved.size:
        raise StarvedDatasets(
            f"datasets {starved.tolist()} have weights too small for mixture block size {block_size}; "
            "raise mixture_block_size",
            starved.tolist(),
        )
    return q


def choose_block_size(weights: Sequence[float], tolerance: float = SHARE_TOLERANCE) -> int:
    """The smallest block whose quotas give every dataset its weight within `tolerance`.

    Small blocks make shares exact over short windows (a batch of a 0.7/0.3 mixture holds
    70% +- one sample of the first dataset); every positive weight gets at least one slot.
    """
    w = np.asarray(weights, dtype=np.float64)
    quotas(w, MAX_BLOCK_SIZE)  # validates the weights
    w = normalized(w)
    for block in range(1, MAX_BLOCK_SIZE + 1):
        ideal = w * block
        q = np.floor(ideal)
        q[np.argsort(-(ideal - q), kind="stable")[: block - int(q.sum())]] += 1
        if np.abs(q / block - w).max() <= tolerance and not np.any((w > 0) & (q == 0)):
            return block
    return MAX_BLOCK_SIZE


def _spread_order(q: np.ndarray) -> np.ndarray:
    """Unshuffled slot -> q: dataset d's k-th sample goes to its ideal time (k + 0.5) / q[d]."""
    dataset = np.repeat(np.arange(q.size), q)
    k = np.arange(q.sum()) - np.repeat(np.cumsum(q) - q, q)
    ideal = (k + 0.5) / q[dataset]
    return np.lexsort((dataset, ideal)).astype(np.int64)


class MixtureSchedule:
    """Global position -> (dataset index, that dataset's stream position); see module doc."""

    def __init__(
        self,
        weights: Sequence[float],
        *,
        seed: int = 0,
        shuffle: bool = True,
        block_size: int | None = DEFAULT_BLOCK_SIZE,
    ):
        if block_size is None:
            block_size = choose_block_size(weights)
        if block_size < 1:
            raise ValueError(f"mixture block size must be >= 1, got {block_size}")
        self.block_size, self.seed, self.shuffle = int(block_size), int(seed), bool(shuffle)
        self.quota = quotas(weights, self.block_size)
        self.weights = normalized(weights)  # as given, normalized (the quotas round them)
        self.cum_quota = np.concatenate([[0], np.cumsum(self.quota)]).astype(np.int64)
        self._perm = KeyedPermutation(self.block_size)
        self._key = stream_key(self.seed, _MIXTURE_STREAM)
        self._spread = None if shuffle else _spread_order(self.quota)

    @property
    def shares(self) -> np.ndarray:
        """The exact per-block share of each dataset (weights after rounding)."""
        return self.quota / self.block_size

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dataset index, stream position in that dataset) for each global position."""
        positions = np.asarray(positions, dtype=np.int64)
        block, slot = positions // self.block_size, positions % self.block_size
        if self._spread is not None:
            q = self._spread[slot]
        else:
            uniq, inverse = np.unique(block, return_inverse=True)
            q = self._perm(slot, round_keys(self._key, uniq)[:, inverse.reshape(-1)])
        dataset = np.searchsorted(self.cum_quota, q, side="right") - 1
        return dataset, block * self.quota[dataset] + (q - self.cum_quota[dataset])
