"""Exact quantiles of streamed data: order statistics found by repeated narrowing, with
memory independent of the number of values (docs/METADATA.md has the proofs).

numpy's default ("linear") quantile of n values interpolates between the order statistics
of ranks floor(q (n - 1)) and the next. Per dimension, a first pass counts every value into
NUM_BINS equal bins over [min, max] (`uniform_edges`, counted by the caller); each further
pass narrows the bins that hold the wanted ranks, either by re-binning their values into
NUM_SUB_BINS sub-bins (tracking each sub-bin's smallest and largest value) or, once a bin
holds at most COLLECT values, by keeping those values and selecting exactly. The result is
exact unless MAX_REFINE_PASSES passes do not suffice (values closer than ~1e-20 of the
range); then a value is the midpoint of the interval still holding its order statistic,
and its certified error is half that interval (0.0 when exact).

    grids = {"x": Grid(edges, counts)}            # the pass over uniform_edges(min, max)
    found = exact_quantiles(grids, {"x": n}, lambda keys: ({"x": b} for b in blocks))
    quantiles, error = found["x"]                 # "q01".."q99" -> (D,) arrays
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping

import numpy as np

from jaxload.errors import DatasetError
from jaxload.stats.feature_stats import QUANTILES, Grid

NUM_BINS = 2048  # first-pass histogram bins per dimension
NUM_SUB_BINS = 512  # sub-bins of a narrowed bin
COLLECT = 1024  # a bin holding at most this many values is selected from exactly
MAX_REFINE_PASSES = 8  # each narrows an interval >= NUM_SUB_BINS times: ~1e-21 of the range

# One pass over the data for the given keys: per block, key -> (n, D) float64 values.
ReadPass = Callable[[Collection[str]], Iterable[Mapping[str, np.ndarray]]]
Found = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]  # quantiles, certified error


def order_ranks(count: int) -> dict[str, tuple[int, int, float]]:
    """numpy's linear quantile: (rank i, rank i+1, fraction) for each quantile."""
    out = {}
    for name, q in QUANTILES.items():
        h = q * (count - 1)
        i = int(np.floor(h))
        out[name] = (i, min(i + 1, count - 1), h - i)
    return out


def equal_edges(lo: float, hi: float, bins: int) -> np.ndarray:
    """`bins` + 1 equally spaced edges from lo to hi."""
    return np.linspace(lo, hi, bins + 1)


def uniform_edges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The first pass's NUM_BINS equal bins per dimension over [lo[d], hi[d]]."""
    return np.stack([equal_edges(a, b, NUM_BINS) for a, b in zip(lo, hi)])


def locate(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value: bin j holds edges[j] <= v < edges[j+1]; the first and last bins
    are open-ended. Pure comparisons, so every pass puts a value in the same bin."""
    return np.searchsorted(edges[1:-1], values, side="right")


def exact_quantiles(
    grids: Mapping[str, Grid], counts: Mapping[str, int], read_pass: ReadPass
) -> dict[str, Found]:
    """q01..q99 per key and dimension, and the certified bound on their error, from each
    key's first-pass histogram (`grids`, over `uniform_edges`) and up to
    MAX_REFINE_PASSES further passes over the same data (`read_pass(keys)` yields the
    values of the keys still narrowing)."""
    selections = {key: _Selection(grid, counts[key]) for key, grid in grids.items()}
    for _ in range(MAX_REFINE_PASSES):
        active = [key for key, sel in selections.items() if sel.active]
        if not active:
            break
        for key in active:
            selections[key].start_pass()
        for columns in read_pass(active):
            for key in active:
                selections[key].update(columns[key])
        for key in active:
            selections[key].end_pass()
    return {key: sel.quantiles() for key, sel in selections.items()}


@dataclasses.dataclass
class _Interval:
    """The values lower <= v < upper of one dimension, known to lie in [vmin, vmax], holding
    the wanted ranks (dimension rank -> rank inside the interval)."""

    dim: int
    lower: float
    upper: float
    vmin: float
    vmax: float
    size: int
    ranks: dict[int, int]
    # accumulators of the current pass: a sub-histogram, or the values themselves
    edges: np.ndarray | None = None
    counts: np.ndarray | None = None
    mins: np.ndarray | None = None
    maxs: np.ndarray | None = None
    values: list[np.ndarray] | None = None

    def start_pass(self) -> None:
        if self.size <= COLLECT:
            self.values = []
            return
        self.edges = equal_edges(self.vmin, self.vmax, NUM_SUB_BINS)
        self.counts = np.zeros(NUM_SUB_BINS, dtype=np.int64)
        self.mins = np.full(NUM_SUB_BINS, np.inf)
        self.maxs = np.full(NUM_SUB_BINS, -np.inf)

    def add(self, v: np.ndarray) -> None:
        if self.values is not None:
            self.values.append(v)
            return
        sub = locate(v, self.edges)
        self.counts += np.bincount(sub, minlength=NUM_SUB_BINS)
        np.minimum.at(self.mins, sub, v)
        np.maximum.at(self.maxs, sub, v)


class _Selection:
    """Exact order statistics of the dimensions of one feature, by repeated narrowing.

    Built from the first-pass histogram; then `start_pass`, `update` for every block,
    `end_pass` while `active` is not empty; `quantiles()` at the end.
    """

    def __init__(self, grid: Grid, count: int):
        self.count = count
        self.found: dict[tuple[int, int], tuple[float, float]] = {}  # (dim, rank) -> value, error
        self.active: list[_Interval] = []
        wanted = sorted({r for i, j, _ in order_ranks(count).values() for r in (i, j)})
        for d in range(grid.counts.shape[0]):
            row = grid.edges[d]
            whole = _Interval(d, -np.inf, np.inf, row[0], row[-1], count, {})
            whole.ranks = {r: r for r in wanted}
            self._split(whole, row, grid.counts[d])

    def _split(
        self,
        parent: _Interval,
        edges: np.ndarray,
        counts: np.ndarray,
        mins: np.ndarray | None = None,
        maxs: np.ndarray | None = None,
    ) -> None:
        """Narrows `parent` to the bins of `edges` holding its ranks."""
        cumulative = np.cumsum(counts)
        last = len(counts) - 1
        children: dict[int, _Interval] = {}
        for rank, inside in parent.ranks.items():
            s = int(np.searchsorted(cumulative, inside, side="right"))
            if s not in children:
                lower = edges[s] if s > 0 else parent.lower
                upper = edges[s + 1] if s < last else parent.upper
                vmin = mins[s] if mins is not None else max(edges[s], parent.vmin)
                vmax = maxs[s] if maxs is not None else min(edges[s + 1], parent.vmax)
                children[s] = _Interval(parent.dim, lower, upper, vmin, vmax, int(counts[s]), {})
            children[s].ranks[rank] = inside - (int(cumulative[s - 1]) if s > 0 else 0)
        for child in children.values():
            if child.vmin == child.vmax:  # one distinct value: exact
                self.found |= {(child.dim, r): (float(child.vmin), 0.0) for r in child.ranks}
            else:
                self.active.append(child)

    def start_pass(self) -> None:
        self._by_dim: dict[int, list[_Interval]] = {}
        for interval in sorted(self.active, key=lambda i: (i.dim, i.lower)):
            interval.start_pass()
            self._by_dim.setdefault(interval.dim, []).append(interval)
        self._lowers = {d: np.array([i.lower for i in v]) for d, v in self._by_dim.items()}
        self._uppers = {d: np.array([i.upper for i in v]) for d, v in self._by_dim.items()}

    def update(self, x: np.ndarray) -> None:
        for d, intervals in self._by_dim.items():
            v = x[:, d]
            which = np.searchsorted(self._lowers[d], v, side="right") - 1
            inside = which >= 0
            inside[inside] &= v[inside] < self._uppers[d][which[inside]]
            v, which = v[inside], which[inside]
            for k in np.unique(which):
                intervals[k].add(v[which == k])

    def end_pass(self) -> None:
        active, self.active = self.active, []
        for interval in active:
            if interval.values is not None:
                values = np.sort(np.concatenate([np.empty(0), *interval.values]))
                _check_size(len(values), interval)
                for rank, inside in interval.ranks.items():
                    self.found[(interval.dim, rank)] = (float(values[inside]), 0.0)
            else:
                _check_size(int(interval.counts.sum()), interval)
                self._split(interval, interval.edges, interval.counts, interval.mins, interval.maxs)

    def quantiles(self) -> Found:
        """q01..q99 per dimension, and the certified bound on the error of each."""
        for interval in self.active:  # passes ran out: midpoint of what is left
            middle, half = (
                0.5 * (interval.vmin + interval.vmax),
                0.5 * (interval.vmax - interval.vmin),
            )
            self.found |= {(interval.dim, r): (middle, half) for r in interval.ranks}
        dims = 1 + max(d for d, _ in self.found)
        out = {name: np.empty(dims) for name in QUANTILES}
        error = {name: np.empty(dims) for name in QUANTILES}
        for d in range(dims):
            for name, (i, j, f) in order_ranks(self.count).items():
                (vi, ei), (vj, ej) = self.found[(d, i)], self.found[(d, j)]
                out[name][d] = vi + f * (vj - vi)
                error[name][d] = (1 - f) * ei + f * ej
        return out, error


def _check_size(seen: int, interval: _Interval) -> None:
    if seen != interval.size:
        raise DatasetError(
            f"stats: dimension {interval.dim} had {interval.size} values in [{interval.lower}, "
            f"{interval.upper}) in one pass and {seen} in the next; the data changed while "
            "it was read"
        )
