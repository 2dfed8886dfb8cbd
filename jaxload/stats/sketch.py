"""The quantile sketch kept beside stats.json, and merging the stats of several datasets.

After the exact quantiles, a last pass counts every dimension into a histogram whose bins
follow them (`sketch_edges`: 64, 192, 768, 768, 192, 64 bins between min, q01, q10, q50,
q90, q99, max), kept in `meta/stats_sketch.npz` (`jaxload.stats.store`) so that the stats
of a mixture can be merged without the data (`merge_stats`): mean/std/min/max/count
exactly, quantiles from the union of the datasets' histograms, within the widest bin (of
each dataset) containing the estimate of the exact quantile of the concatenated data; that
certified bound is reported in `FeatureStats.quantile_error` (docs/METADATA.md has the
proof).

    >>> import jaxload.stats as stats
    >>> a = stats.load_stats("out/demo")
    >>> merged = stats.merge_stats([a, a])       # the dataset twice
    >>> merged["action"].count == 2 * a["action"].count
    True
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from jaxload.stats.feature_stats import QUANTILES, FeatureStats, Grid
from jaxload.stats.moments import Moments
from jaxload.stats.quantiles import equal_edges, locate, order_ranks

log = logging.getLogger("jaxload.stats.sketch")

# Sketch bins between min, q01, q10, q50, q90, q99 and max: dense where the mass is, and an
# outlier widens only the outer segment.
SKETCH_SEGMENT_BINS = (64, 192, 768, 768, 192, 64)


def sketch_edges(boundaries: Sequence[float]) -> np.ndarray:
    """Sketch bin edges from [min, q01, q10, q50, q90, q99, max]: SKETCH_SEGMENT_BINS bins
    per segment, equal inside, growing geometrically outwards in the two outer segments
    (from the width of their inner neighbour's bins), so an outlier costs resolution only
    far out in the tail."""
    b, n = [float(v) for v in boundaries], SKETCH_SEGMENT_BINS
    inner = [equal_edges(b[k], b[k + 1], n[k]) for k in range(1, 5)]
    low = _tail_edges(b[1], b[0], n[0], (b[2] - b[1]) / n[1])[::-1]
    high = _tail_edges(b[5], b[6], n[5], (b[5] - b[4]) / n[4])
    return np.concatenate([low[:-1], *(e[:-1] for e in inner), high])


def _tail_edges(start: float, end: float, bins: int, first: float) -> np.ndarray:
    """`bins` + 1 edges from start to end (either direction) whose widths grow by a constant
    ratio from `first`; equal widths where those would already be narrower than `first`."""
    length = abs(end - start)
    if first <= 0 or length <= bins * first:
        return equal_edges(start, end, bins)

    def total(log_ratio: float) -> float:  # sum of the widths first * r**k, k < bins
        return first * np.expm1(bins * log_ratio) / np.expm1(log_ratio)

    lo, hi = 0.0, 1.0
    while total(hi) < length:
        hi *= 2
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if total(mid) < length else (lo, mid)
    widths = first * np.exp(hi * np.arange(bins))
    offsets = np.concatenate([[0.0], np.cumsum(widths)]) * (length / widths.sum())
    return start + np.sign(end - start) * offsets


def concat_grids(parts: Sequence[Grid]) -> Grid:
    """One grid from a feature's dimension groups."""
    if len(parts) == 1:
        return parts[0]
    return Grid(np.concatenate([g.edges for g in parts]), np.concatenate([g.counts for g in parts]))


# --- merging (mixtures) ------------------------------------------------------------------------


def merge_stats(parts: Sequence[Mapping[str, FeatureStats]]) -> dict[str, FeatureStats]:
    """Stats of the concatenation of several datasets (count-weighted), per key.

    mean/std/min/max/count are exact (Chan's merge of (count, mean, M2)). Quantiles come from
    the union of the parts' histograms (within the widest bin of the exact quantile); where
    a part has no histogram (image stats copied from LeRobot) they fall back to LeRobot's
    count-weighted average of the parts' quantiles, with `quantile_error` None. A key that
    only some parts have is merged over those parts.

    Example::

        merged = merge_stats([load_stats("out/a"), load_stats("out/b")])
    """
    if not parts:
        raise ValueError("merge_stats needs at least one part")
    keys = list(dict.fromkeys(k for p in parts for k in p))
    return {k: _merge_feature(k, [p[k] for p in parts if k in p]) for k in keys}


def _merge_feature(key: str, items: list[FeatureStats]) -> FeatureStats:
    shapes = {s.shape for s in items}
    if len(shapes) > 1:
        raise ValueError(f"stats of {key!r} have different shapes across datasets: {shapes}")
    if len(items) == 1:
        return items[0]
    shape = items[0].shape
    total = Moments(int(np.prod(shape)))
    for s in items:
        m = Moments(total.mean.size)
        m.count, m.mean = s.count, s.mean.reshape(-1)
        m.m2 = s.std.reshape(-1) ** 2 * s.count
        m.min, m.max = s.min.reshape(-1), s.max.reshape(-1)
        total.merge(m)
    grids = tuple(g for s in items for g in s.grids)
    if all(s.grids for s in items):
        quantiles, error = _grid_quantiles(grids, total.count)
    else:
        log.warning(
            "stats of %r: some datasets have no quantile sketch; merged quantiles are the "
            "count-weighted average of theirs (LeRobot's approximation)",
            key,
        )
        weights = np.array([s.count for s in items], dtype=np.float64) / total.count
        names = set.intersection(*(set(s.quantiles) for s in items))
        quantiles = {
            q: sum(w * s.quantiles[q].reshape(-1) for w, s in zip(weights, items)) for q in names
        }
        error, grids = None, ()
    return FeatureStats(
        count=total.count,
        mean=total.mean.reshape(shape),
        std=total.std.reshape(shape),
        min=total.min.reshape(shape),
        max=total.max.reshape(shape),
        quantiles={q: v.reshape(shape) for q, v in quantiles.items()},
        quantile_error=None if error is None else {q: v.reshape(shape) for q, v in error.items()},
        grids=grids,
    )


def _grid_quantiles(
    grids: Sequence[Grid], count: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Quantiles of the union of histograms, by inverting the sum of their piecewise-linear
    CDFs, and a certified bound on their error.

    Each histogram's CDF is exact at its bin edges, so the estimate x of the r-th smallest
    value is within delta = max over histograms of the width of their bin containing x
    (docs/METADATA.md has the proof).
    """
    dims = grids[0].counts.shape[0]
    ranks = order_ranks(count)
    wanted = sorted({r for i, j, _ in ranks.values() for r in (i, j)})
    out = {name: np.empty(dims) for name in QUANTILES}
    error = {name: np.empty(dims) for name in QUANTILES}
    for d in range(dims):
        left = np.concatenate([g.edges[d, :-1] for g in grids])
        width = np.concatenate([np.diff(g.edges[d]) for g in grids])
        mass = np.concatenate([g.counts[d] for g in grids]).astype(np.float64)
        keep = mass > 0
        lo = np.full(len(wanted), min(g.edges[d, 0] for g in grids))
        hi = np.full(len(wanted), max(g.edges[d, -1] for g in grids))
        values = _invert_cdf(left[keep], width[keep], mass[keep], np.array(wanted) + 0.5, lo, hi)
        at = {r: (v, _containing_width(grids, d, v)) for r, v in zip(wanted, values)}
        for name, (i, j, f) in ranks.items():
            (vi, ei), (vj, ej) = at[i], at[j]
            out[name][d] = vi + f * (vj - vi)
            error[name][d] = (1 - f) * ei + f * ej
    return out, error


def _containing_width(grids: Sequence[Grid], d: int, x: float) -> float:
    """Widest bin, over the histograms, that contains x (0 outside all of them)."""
    widest = 0.0
    for g in grids:
        e = g.edges[d]
        if e[0] <= x <= e[-1]:
            j = int(locate(np.array([x]), e)[0])
            widest = max(widest, float(e[j + 1] - e[j]))
            if x == e[j] and j > 0:  # on an edge: the bin below touches x too
                widest = max(widest, float(e[j] - e[j - 1]))
    return widest


def _invert_cdf(
    left: np.ndarray,
    width: np.ndarray,
    mass: np.ndarray,
    targets: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> np.ndarray:
    """Per target, the smallest x with sum(mass * clip((x - left) / width, 0, 1)) >= target
    (bisection; a zero-width bin is a step at `left`)."""
    flat = width <= 0
    safe = np.where(flat, 1.0, width)
    for _ in range(64):  # halves [lo, hi] each time: float64 resolution after ~60 steps
        mid = 0.5 * (lo + hi)
        frac = np.clip((mid[:, None] - left) / safe, 0.0, 1.0)
        frac = np.where(flat, (mid[:, None] >= left) * 1.0, frac)
        above = (frac * mass).sum(axis=1) >= targets
        lo, hi = np.where(above, lo, mid), np.where(above, mid, hi)
    return hi
