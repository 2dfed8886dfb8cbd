"""Exact streaming moments: count, mean, M2 (sum of squared deviations), min and max per
dimension, mergeable in any order with Chan, Golub & LeVeque's pairwise update
(docs/METADATA.md). Used per block of frames and to merge the stats of datasets.

    m = Moments(3)
    m.update(block_a)              # (n, 3) rows
    m.update(block_b)
    m.mean, m.std                  # population std, as LeRobot
"""

from __future__ import annotations

import numpy as np


class Moments:
    """Exact streaming count, mean, M2 (sum of squared deviations), min and max per dimension,
    mergeable in any order (Chan, Golub & LeVeque's pairwise update)."""

    def __init__(self, dims: int):
        self.count = 0
        self.mean = np.zeros(dims)
        self.m2 = np.zeros(dims)
        self.min = np.full(dims, np.inf)
        self.max = np.full(dims, -np.inf)

    def update(self, x: np.ndarray) -> None:
        """Adds rows `x` of shape (n, dims)."""
        if len(x) == 0:
            return
        other = Moments(x.shape[1])
        other.count, other.mean = len(x), x.mean(axis=0)
        other.m2 = ((x - other.mean) ** 2).sum(axis=0)
        other.min, other.max = x.min(axis=0), x.max(axis=0)
        self.merge(other)

    def merge(self, other: Moments) -> None:
        n = self.count + other.count
        if other.count == 0:
            return
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.count / n)
        self.m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / n)
        self.count = n
        self.min = np.minimum(self.min, other.min)
        self.max = np.maximum(self.max, other.max)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.m2 / max(self.count, 1))  # population std, as LeRobot
