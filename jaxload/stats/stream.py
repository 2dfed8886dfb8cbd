"""Computing normalization statistics by streaming frame blocks, from converted datasets
(`compute_stats`) or from any data that can be read more than once (`stream_stats`).

Per feature (every column of the frame records: `observation.state`, `action`, ...,
`timestamp`, `index`): count, mean, std (population, as LeRobot), min, max and the
quantiles q01, q10, q50, q90, q99. The passes over the data:

1. moments and range (`jaxload.stats.moments`), checking every value is finite;
2. a histogram over [min, max], then narrowing passes until the quantiles are exact
   (`jaxload.stats.quantiles`);
3. the quantile-shaped sketch kept for merging (`jaxload.stats.sketch`).

Memory does not grow with the number of frames: wide features go in groups of dimensions
under SKETCH_BUDGET_BYTES.

    >>> import jaxload.stats as stats
    >>> s = stats.compute_stats("out/demo")
    >>> s["action"].count, s["action"].shape
    (20, (4,))
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.errors import DatasetError
from jaxload.format.reader import DatasetFiles
from jaxload.stats.feature_stats import QUANTILES, FeatureStats, Grid
from jaxload.stats.moments import Moments
from jaxload.stats.quantiles import (
    COLLECT,
    NUM_BINS,
    NUM_SUB_BINS,
    exact_quantiles,
    locate,
    uniform_edges,
)
from jaxload.stats.sketch import concat_grids, sketch_edges

CHUNK_FRAMES = 65536  # frames per block handed to the accumulators (episodes concatenated)
# Memory per dimension: a histogram (16 * NUM_BINS bytes with its edges) plus up to 10
# narrowed bins of 24 * NUM_SUB_BINS bytes (~160 KB); wide features go in groups of
# dimensions under this budget.
SKETCH_BUDGET_BYTES = 256 * 2**20

Blocks = Callable[[], Iterable[Mapping[str, Any]]]
_WHERE = "__where__"  # optional block entry: (dataset, episode index per row), for errors


def compute_stats(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    keys: Iterable[str] | None = None,
) -> dict[str, FeatureStats]:
    """Stats of every tabular feature over one dataset, or over the concatenation of several.

    Streams the frame blocks at least four times (moments and range, histogram, narrowing,
    sketch; see the module docstring); memory does not grow with the number of frames.
    Raises DatasetError naming the dataset and episode for non-finite values or truncated
    records.

    Example::

        s = compute_stats(["out/a", "out/b"])      # exact over the concatenated data
        s["observation.state"].std, s["observation.state"].quantile_error
    """
    roots = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    sources = [DatasetFiles(r) for r in roots]
    shapes = _common_features(sources, keys)

    def blocks() -> Iterator[dict[str, Any]]:
        for files in sources:
            for rows in _chunks(files.iter_frames(), CHUNK_FRAMES):
                block: dict[str, Any] = {k: rows[k] for k in shapes}
                block[_WHERE] = (files.root, rows["episode_index"])  # in every dataset
                yield block

    return stream_stats(blocks, shapes)


def stream_stats(blocks: Blocks, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, FeatureStats]:
    """The streaming core of compute_stats, over any data that can be read more than once.

    `blocks()` returns a fresh iterator over the same data on every call (it is called at
    least four times); each item maps a key of `shapes` to a block of rows, shape
    (n, *shape).

    Example:
        >>> import jaxload.stats as stats
        >>> chunks = [{"x": np.arange(10.0 * k, 10.0 * k + 10)} for k in range(10)]
        >>> stats.stream_stats(lambda: iter(chunks), {"x": (1,)})["x"].quantiles["q50"]
        array([49.5])
    """
    dims = {k: int(np.prod(shape, dtype=np.int64)) for k, shape in shapes.items()}
    moments = {k: Moments(d) for k, d in dims.items()}
    for block in blocks():
        for key, m in moments.items():
            x = _columns(block[key], dims[key], slice(None))
            bad = ~np.isfinite(x).all(axis=1)
            if bad.any():
                raise DatasetError(
                    f"{_where(block, int(np.argmax(bad)))}: feature {key!r} has NaN or inf "
                    "values; normalization stats are undefined"
                )
            m.update(x)

    quantiles: dict[str, dict[str, np.ndarray]] = {k: {} for k in dims}
    errors: dict[str, dict[str, np.ndarray]] = {k: {} for k in dims}
    grids: dict[str, list[Grid]] = {k: [] for k in dims}
    for group in _dim_groups(dims):
        for key, (grid, q, err, sl) in _quantiles_of_group(blocks, group, moments, dims).items():
            grids[key].append(grid)
            for name, v in q.items():
                quantiles[key].setdefault(name, np.empty(dims[key]))[sl] = v
            for name, v in err.items():
                errors[key].setdefault(name, np.empty(dims[key]))[sl] = v

    out = {}
    for key, shape in shapes.items():
        m = moments[key]
        if m.count == 0:
            continue
        out[key] = FeatureStats(
            count=m.count,
            mean=m.mean.reshape(shape),
            std=m.std.reshape(shape),
            min=m.min.reshape(shape),
            max=m.max.reshape(shape),
            quantiles={n: v.reshape(shape) for n, v in quantiles[key].items()},
            quantile_error={n: v.reshape(shape) for n, v in errors[key].items()},
            grids=(concat_grids(grids[key]),),
        )
    return out


def _chunks(rows: Iterable[np.ndarray], frames: int) -> Iterator[np.ndarray]:
    """Episodes' rows concatenated into blocks of about `frames` rows (fewer Python steps
    per frame for datasets of many short episodes)."""
    pending, size = [], 0
    for r in rows:
        pending.append(r)
        size += len(r)
        if size >= frames:
            yield np.concatenate(pending)
            pending, size = [], 0
    if pending:
        yield np.concatenate(pending)


def _columns(values: np.ndarray, dims: int, sl: slice) -> np.ndarray:
    return np.asarray(values).reshape(-1, dims)[:, sl].astype(np.float64)


def _where(block: Mapping[str, Any], row: int) -> str:
    """Where a block's row comes from, for error messages ("<dataset>: episode <e>")."""
    if _WHERE not in block:
        return f"stats input, row {row} of a block"
    root, episodes = block[_WHERE]
    return f"{root}: episode {int(episodes[row])}"


def _common_features(sources: list[DatasetFiles], keys: Iterable[str] | None) -> dict[str, tuple]:
    """Key -> LeRobot stats shape, for keys every dataset has with the same shape."""
    first = sources[0].info.features
    wanted = [k for k, f in first.items() if not f.is_string] if keys is None else list(keys)
    out = {}
    for key in wanted:
        if any(key in s.info.features and s.info.features[key].is_string for s in sources):
            raise ValueError(f"feature {key!r} holds strings: it has no statistics")
        shapes = {s.info.features[key].shape if key in s.info.features else None for s in sources}
        if None in shapes:
            if keys is not None:
                raise KeyError(f"feature {key!r} is not in every dataset")
            continue
        if len(shapes) > 1:
            raise ValueError(f"feature {key!r} has different shapes across datasets: {shapes}")
        shape = shapes.pop()
        out[key] = shape if shape else (1,)  # LeRobot stores scalar stats with shape [1]
    return out


def _dim_groups(dims: Mapping[str, int]) -> list[list[tuple[str, slice]]]:
    """Features' dimensions in groups whose histograms fit SKETCH_BUDGET_BYTES."""
    per_dim = 16 * NUM_BINS + 10 * max(24 * NUM_SUB_BINS, 8 * COLLECT)  # edges+counts, 10 ranks
    capacity = max(1, SKETCH_BUDGET_BYTES // per_dim)
    groups: list[list[tuple[str, slice]]] = [[]]
    used = 0
    for key, d in dims.items():
        start = 0
        while start < d:
            if used == capacity:
                groups.append([])
                used = 0
            take = min(d - start, capacity - used)
            groups[-1].append((key, slice(start, start + take)))
            used, start = used + take, start + take
    return [g for g in groups if g]


def _quantiles_of_group(
    blocks: Blocks,
    group: list[tuple[str, slice]],
    moments: Mapping[str, Moments],
    dims: Mapping[str, int],
) -> dict[str, tuple[Grid, dict[str, np.ndarray], dict[str, np.ndarray], slice]]:
    """For one group of (feature, dimensions): the histogram pass, the narrowing passes and
    the sketch pass."""
    slices = dict(group)  # a feature appears at most once in a group

    def read_pass(keys: Collection[str]) -> Iterator[dict[str, np.ndarray]]:
        for block in blocks():
            yield {key: _columns(block[key], dims[key], slices[key]) for key in keys}

    uniform = {key: uniform_edges(moments[key].min[sl], moments[key].max[sl]) for key, sl in group}
    grids = _histograms(read_pass, uniform)
    results = exact_quantiles(grids, {key: moments[key].count for key in slices}, read_pass)
    edges = {}
    for key, sl in group:
        q = results[key][0]
        lo, hi = moments[key].min[sl], moments[key].max[sl]
        edges[key] = np.stack(
            [sketch_edges([lo[d], *(q[n][d] for n in QUANTILES), hi[d]]) for d in range(len(lo))]
        )
    sketches = _histograms(read_pass, edges)
    return {key: (sketches[key], *results[key], sl) for key, sl in group}


def _histograms(
    read_pass: Callable[[Collection[str]], Iterable[Mapping[str, np.ndarray]]],
    edges: Mapping[str, np.ndarray],
) -> dict[str, Grid]:
    """One pass: every dimension of the keys of `edges` counted into its bins."""
    grids = {
        k: Grid(e, np.zeros((e.shape[0], e.shape[1] - 1), dtype=np.int64)) for k, e in edges.items()
    }
    for columns in read_pass(list(grids)):
        for key, x in columns.items():
            grid = grids[key]
            for d in range(x.shape[1]):
                grid.counts[d] += np.bincount(
                    locate(x[:, d], grid.edges[d]), minlength=grid.counts.shape[1]
                )
    return grids
