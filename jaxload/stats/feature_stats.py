"""The result type of normalization statistics: `FeatureStats` per feature, in LeRobot's
`meta/stats.json` structure, and the `Grid` histograms kept beside them for merging.

    s = FeatureStats.from_json({"mean": [0.0], "std": [1.0], "min": [-2.0], "max": [2.0],
                                "count": [10]})
    s.get("mean"), s.to_json()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxload.errors import DatasetError

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_ORDER = ("min", "max", "mean", "std", "count", *QUANTILES)  # LeRobot's key order


@dataclasses.dataclass(frozen=True)
class Grid:
    """A histogram per dimension: `counts[d, j]` values v with edges[d, j] <= v <
    edges[d, j + 1] (the first and last bins open-ended; all values lie within the edges)."""

    edges: np.ndarray  # (D, bins + 1), non-decreasing per row
    counts: np.ndarray  # (D, bins) int64


@dataclasses.dataclass(frozen=True)
class FeatureStats:
    """Statistics of one feature; arrays have LeRobot's stats shape (`(1,)` for scalars,
    `(D,)` for vectors, `(3, 1, 1)` for images)."""

    count: int
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    quantiles: dict[str, np.ndarray]  # "q01", "q10", "q50", "q90", "q99"
    # certified bound on |quantile - exact quantile| per quantile name; None: unknown
    quantile_error: dict[str, np.ndarray] | None = None
    grids: tuple[Grid, ...] = ()  # histograms for merging; () for copied stats

    @property
    def shape(self) -> tuple[int, ...]:
        return self.mean.shape

    def get(self, name: str) -> np.ndarray:
        """A stat by its stats.json name ("mean", "q01", ...)."""
        if name in QUANTILES:
            return self.quantiles[name]
        if name == "count":
            return np.array([self.count])
        return getattr(self, name)

    def to_json(self) -> dict[str, list]:
        """LeRobot's stats.json entry: every stat as a (nested) list."""
        names = [n for n in STAT_ORDER if n not in QUANTILES or n in self.quantiles]
        return {name: self.get(name).tolist() for name in names}

    def check(self, where: str, shape: tuple[int, ...] | None = None) -> None:
        """Raises a DatasetError naming `where` and the stat unless every stat is finite,
        std >= 0 and (given) the stats have `shape`: a NaN std or an inf mean
        would put NaN or inf into every normalized batch."""
        if shape is not None and self.shape != tuple(shape):
            raise DatasetError(
                f"{where}: stats of shape {self.shape}, but the feature's stats have shape "
                f"{tuple(shape)}"
            )
        for name in ("mean", "std", "min", "max", *self.quantiles):
            values = self.get(name)
            if not np.all(np.isfinite(values)):
                raise DatasetError(f"{where}: {name} is not finite ({values.tolist()})")
        if np.any(self.std < 0):
            raise DatasetError(f"{where}: std is negative ({self.std.tolist()})")

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], where: str = "stats") -> FeatureStats:
        """From a stats.json entry (LeRobot's or ours); the quantiles are optional there."""
        try:
            mean = np.asarray(raw["mean"], dtype=np.float64)
            arrays = {
                k: np.asarray(raw[k], dtype=np.float64).reshape(mean.shape)
                for k in ("std", "min", "max")
            }
            quantiles = {
                q: np.asarray(raw[q], dtype=np.float64).reshape(mean.shape)
                for q in QUANTILES
                if q in raw
            }
            count = int(np.asarray(raw["count"]).reshape(-1)[0])
        except (KeyError, TypeError, ValueError) as e:
            raise DatasetError(f"{where}: malformed stats entry ({type(e).__name__}: {e})") from e
        return cls(count=count, mean=mean, quantiles=quantiles, **arrays)
