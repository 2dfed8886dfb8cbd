"""Normalization statistics of tabular features, streamed from a converted dataset.

Per feature (every column of the frame records: `observation.state`, `action`, ...,
`timestamp`, `index`): count, mean, std (population, as LeRobot), min, max and the
quantiles q01, q10, q50, q90, q99, in LeRobot's `meta/stats.json` structure. Video is never
decoded: image stats are copied per channel from the source's stats.json when it has them.

Method (docs/METADATA.md has the details and the proofs):

* mean/std: exact, with Chan, Golub & LeVeque's parallel update of (count, mean, M2) per
  block of frames; the same merge combines datasets (`merge_stats`).
* quantiles (numpy's default "linear" definition): exact order statistics found by
  streaming selection with memory independent of the number of frames. Pass 1 finds
  min/max (with the moments); pass 2 counts every dimension into NUM_BINS equal bins over
  [min, max]; each further pass narrows the bins that hold the wanted ranks, either by
  re-binning their values into NUM_SUB_BINS sub-bins (tracking each sub-bin's smallest and
  largest value) or, once a bin holds at most COLLECT values, by keeping those values and
  selecting exactly. The result is exact unless MAX_REFINE_PASSES passes do not suffice
  (values closer than ~1e-20 of the range); then a value is the midpoint of the interval
  still holding its order statistic, and its certified error, half that interval, is
  reported per quantile and value in `FeatureStats.quantile_error` (0.0 when exact).
* a final pass counts every dimension into a histogram whose bins follow the quantiles
  (64, 192, 768, 768, 192, 64 equal bins between min, q01, q10, q50, q90, q99, max), kept
  in `meta/stats_sketch.npz` so that stats of a mixture can be merged without the data
  (`merge_stats`): its quantiles come from the union of the datasets' histograms and are
  within the widest bin (of each dataset) containing the estimate of the exact quantile of
  the concatenated data; that certified bound is reported in `quantile_error`.

Example:
    >>> from jaxload import stats
    >>> stats.write_stats("out/pusht", "lerobot/pusht/meta/stats.json")  # at conversion
    >>> per_key = stats.load_stats("out/pusht")
    >>> per_key["action"].mean, per_key["action"].quantiles["q99"]
    >>> mixture = stats.merge_stats([stats.load_stats(p) for p in ("out/a", "out/b")])
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from jaxload import format as fmt
from jaxload.errors import DatasetError

log = logging.getLogger("jaxload.stats.compute")

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_ORDER = ("min", "max", "mean", "std", "count", *QUANTILES)  # LeRobot's key order
NUM_BINS = 2048  # pass-2 histogram bins per dimension
NUM_SUB_BINS = 512  # sub-bins of a narrowed bin
COLLECT = 1024  # a bin holding at most this many values is selected from exactly
MAX_REFINE_PASSES = 8  # each narrows an interval >= NUM_SUB_BINS times: ~1e-21 of the range
CHUNK_FRAMES = 65536  # frames per block handed to the accumulators (episodes concatenated)
SKETCH_PATH = "meta/stats_sketch.npz"
SKETCH_VERSION = 1
# Sketch bins between min, q01, q10, q50, q90, q99 and max: dense where the mass is, and an
# outlier widens only the outer segment.
SKETCH_SEGMENT_BINS = (64, 192, 768, 768, 192, 64)
# Memory per dimension: a histogram (16 * NUM_BINS bytes with its edges) plus up to 10
# narrowed bins of 24 * NUM_SUB_BINS bytes (~160 KB); wide features go in groups of
# dimensions under this budget.
SKETCH_BUDGET_BYTES = 256 * 2**20
# Frames decoded per read: bounds memory for very long episodes.
READ_BLOCKS = 1024


# --- the result type -----------------------------------------------------------------------


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


# --- accumulators ----------------------------------------------------------------------------


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


def _order_ranks(count: int) -> dict[str, tuple[int, int, float]]:
    """numpy's linear quantile: (rank i, rank i+1, fraction) for each quantile."""
    out = {}
    for name, q in QUANTILES.items():
        h = q * (count - 1)
        i = int(np.floor(h))
        out[name] = (i, min(i + 1, count - 1), h - i)
    return out


def _edges(lo: float, hi: float, bins: int) -> np.ndarray:
    return np.linspace(lo, hi, bins + 1)


def _locate(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value: bin j holds edges[j] <= v < edges[j+1]; the first and last bins
    are open-ended. Pure comparisons, so every pass puts a value in the same bin."""
    return np.searchsorted(edges[1:-1], values, side="right")


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
        self.edges = _edges(self.vmin, self.vmax, NUM_SUB_BINS)
        self.counts = np.zeros(NUM_SUB_BINS, dtype=np.int64)
        self.mins = np.full(NUM_SUB_BINS, np.inf)
        self.maxs = np.full(NUM_SUB_BINS, -np.inf)

    def add(self, v: np.ndarray) -> None:
        if self.values is not None:
            self.values.append(v)
            return
        sub = _locate(v, self.edges)
        self.counts += np.bincount(sub, minlength=NUM_SUB_BINS)
        np.minimum.at(self.mins, sub, v)
        np.maximum.at(self.maxs, sub, v)


class _Selection:
    """Exact order statistics of the dimensions of one feature, by repeated narrowing.

    Built from the pass-2 histogram; then `start_pass`, `update` for every block, `end_pass`
    while `active` is not empty; `quantiles()` at the end.
    """

    def __init__(self, grid: Grid, count: int):
        self.count = count
        self.found: dict[tuple[int, int], tuple[float, float]] = {}  # (dim, rank) -> value, error
        self.active: list[_Interval] = []
        wanted = sorted({r for i, j, _ in _order_ranks(count).values() for r in (i, j)})
        for d in range(grid.counts.shape[0]):
            edges = grid.edges[d]
            whole = _Interval(d, -np.inf, np.inf, edges[0], edges[-1], count, {})
            whole.ranks = {r: r for r in wanted}
            self._split(whole, edges, grid.counts[d])

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

    def quantiles(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
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
            for name, (i, j, f) in _order_ranks(self.count).items():
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


# --- reading frame blocks --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Source:
    root: Path
    info: fmt.DatasetInfo
    episodes: list[dict[str, Any]]  # episode_index, length, shard, frames_record_start


def _open_source(root: str | os.PathLike) -> _Source:
    root = Path(root)
    info = fmt.read_info(root)
    path = root / fmt.EPISODES_PATH
    if not path.is_file():
        raise DatasetError(f"{path}: missing")
    columns = ["episode_index", "length", "shard", "frames_record_start"]
    try:
        episodes = pq.read_table(path, columns=columns).to_pylist()
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DatasetError(f"{path}: unreadable ({e})") from e
    return _Source(root, info, episodes)


def _iter_rows(source: _Source) -> Iterator[np.ndarray]:
    """Every episode's frame rows (structured arrays), READ_BLOCKS blocks at a time."""
    from array_record.python.array_record_module import ArrayRecordReader

    dtype = source.info.frame_dtype
    readers: dict[int, Any] = {}
    try:
        for ep in source.episodes:
            shard = int(ep["shard"])
            path = source.root / fmt.shard_path(shard)
            if shard not in readers:
                if not path.is_file():
                    raise DatasetError(f"{path}: shard file missing")
                readers[shard] = ArrayRecordReader(str(path), fmt.READER_OPTIONS)
            start, blocks = int(ep["frames_record_start"]), fmt.num_blocks(int(ep["length"]))
            seen = 0
            for first in range(0, blocks, READ_BLOCKS):
                ids = list(range(start + first, start + min(blocks, first + READ_BLOCKS)))
                data = b"".join(readers[shard].read(ids))
                if len(data) % dtype.itemsize:
                    raise DatasetError(
                        f"{path}: episode {ep['episode_index']}: frame records of "
                        f"{len(data)} bytes do not hold whole rows of {dtype.itemsize} bytes"
                    )
                rows = np.frombuffer(data, dtype=dtype)
                seen += len(rows)
                yield rows
            if seen != int(ep["length"]):
                raise DatasetError(
                    f"{path}: episode {ep['episode_index']}: {seen} frame rows for "
                    f"length {ep['length']}"
                )
    finally:
        for reader in readers.values():
            reader.close()


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


# --- computing ---------------------------------------------------------------------------------

Blocks = Callable[[], Iterable[Mapping[str, Any]]]
_WHERE = "__where__"  # optional block entry: (dataset, episode index per row), for errors


def compute_stats(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    keys: Iterable[str] | None = None,
) -> dict[str, FeatureStats]:
    """Stats of every tabular feature over one dataset, or over the concatenation of several.

    Streams the frame blocks at least four times (moments and range, histogram, narrowing,
    sketch; see the module docstring); memory does not grow with the number of frames. Raises DatasetError naming the dataset and
    episode for non-finite values or truncated records.

    Example:
        >>> s = compute_stats("out/pusht")
        >>> s["observation.state"].std, s["observation.state"].quantile_error
    """
    roots = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    sources = [_open_source(r) for r in roots]
    shapes = _common_features(sources, keys)

    def blocks() -> Iterator[dict[str, Any]]:
        for source in sources:
            for rows in _chunks(_iter_rows(source), CHUNK_FRAMES):
                block: dict[str, Any] = {k: rows[k] for k in shapes}
                block[_WHERE] = (str(source.root), rows["episode_index"])  # in every dataset
                yield block

    return stream_stats(blocks, shapes)


def stream_stats(blocks: Blocks, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, FeatureStats]:
    """The streaming core of compute_stats, over any data that can be read more than once.

    `blocks()` returns a fresh iterator over the same data on every call (it is called at
    least four times); each item maps a key of `shapes` to a block of rows, shape
    (n, *shape).

    Example:
        >>> chunks = [{"x": np.random.rand(1000, 3)} for _ in range(10)]
        >>> stream_stats(lambda: iter(chunks), {"x": (3,)})["x"].quantiles["q99"]
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
            grids=(_concat_grids(grids[key]),),
        )
    return out


def _columns(values: np.ndarray, dims: int, sl: slice) -> np.ndarray:
    return np.asarray(values).reshape(-1, dims)[:, sl].astype(np.float64)


def _where(block: Mapping[str, Any], row: int) -> str:
    """Where a block's row comes from, for error messages ("<dataset>: episode <e>")."""
    if _WHERE not in block:
        return f"stats input, row {row} of a block"
    root, episodes = block[_WHERE]
    return f"{root}: episode {int(episodes[row])}"


def _common_features(sources: list[_Source], keys: Iterable[str] | None) -> dict[str, tuple]:
    """Key -> LeRobot stats shape, for keys every dataset has with the same shape."""
    first = sources[0].info.features
    wanted = list(first) if keys is None else list(keys)
    out = {}
    for key in wanted:
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
    uniform = {}
    for key, sl in group:
        lo, hi = moments[key].min[sl], moments[key].max[sl]
        uniform[key] = np.stack([_edges(a, b, NUM_BINS) for a, b in zip(lo, hi)])
    grids = _histograms(blocks, group, dims, uniform)
    selections = {key: _Selection(grids[key], moments[key].count) for key, _ in group}
    for _ in range(MAX_REFINE_PASSES):
        if not any(sel.active for sel in selections.values()):
            break
        for sel in selections.values():
            sel.start_pass()
        for block in blocks():
            for key, sl in group:
                if selections[key].active:
                    selections[key].update(_columns(block[key], dims[key], sl))
        for sel in selections.values():
            sel.end_pass()
    results = {key: selections[key].quantiles() for key, _ in group}
    sketch_edges = {}
    for key, sl in group:
        q = results[key][0]
        lo, hi = moments[key].min[sl], moments[key].max[sl]
        sketch_edges[key] = np.stack(
            [_sketch_edges([lo[d], *(q[n][d] for n in QUANTILES), hi[d]]) for d in range(len(lo))]
        )
    sketches = _histograms(blocks, group, dims, sketch_edges)
    return {key: (sketches[key], *results[key], sl) for key, sl in group}


def _histograms(
    blocks: Blocks,
    group: list[tuple[str, slice]],
    dims: Mapping[str, int],
    edges: Mapping[str, np.ndarray],
) -> dict[str, Grid]:
    """One pass: every dimension of the group counted into its bins."""
    grids = {
        k: Grid(e, np.zeros((e.shape[0], e.shape[1] - 1), dtype=np.int64)) for k, e in edges.items()
    }
    for block in blocks():
        for key, sl in group:
            x, grid = _columns(block[key], dims[key], sl), grids[key]
            for d in range(x.shape[1]):
                grid.counts[d] += np.bincount(
                    _locate(x[:, d], grid.edges[d]), minlength=grid.counts.shape[1]
                )
    return grids


def _sketch_edges(boundaries: Sequence[float]) -> np.ndarray:
    """Sketch bin edges from [min, q01, q10, q50, q90, q99, max]: SKETCH_SEGMENT_BINS bins
    per segment, equal inside, growing geometrically outwards in the two outer segments
    (from the width of their inner neighbour's bins), so an outlier costs resolution only
    far out in the tail."""
    b, n = [float(v) for v in boundaries], SKETCH_SEGMENT_BINS
    inner = [_edges(b[k], b[k + 1], n[k]) for k in range(1, 5)]
    low = _tail_edges(b[1], b[0], n[0], (b[2] - b[1]) / n[1])[::-1]
    high = _tail_edges(b[5], b[6], n[5], (b[5] - b[4]) / n[4])
    return np.concatenate([low[:-1], *(e[:-1] for e in inner), high])


def _tail_edges(start: float, end: float, bins: int, first: float) -> np.ndarray:
    """`bins` + 1 edges from start to end (either direction) whose widths grow by a constant
    ratio from `first`; equal widths where those would already be narrower than `first`."""
    length = abs(end - start)
    if first <= 0 or length <= bins * first:
        return _edges(start, end, bins)

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


def _concat_grids(parts: list[Grid]) -> Grid:
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

    Example:
        >>> merged = merge_stats([load_stats("out/a"), load_stats("out/b")])
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
    ranks = _order_ranks(count)
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
            j = int(_locate(np.array([x]), e)[0])
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


# --- files ---------------------------------------------------------------------------------------


def write_stats(
    dataset_path: str | os.PathLike,
    source_stats: str | os.PathLike | bytes | Mapping[str, Any] | None = None,
) -> dict[str, FeatureStats]:
    """Computes the stats of a converted dataset and writes meta/stats.json (LeRobot's
    structure) and meta/stats_sketch.npz (histograms for merging), each atomically.

    Needs the dataset's meta/info.json, meta/episodes.parquet and shards. Image stats (per
    channel) are copied for the dataset's cameras from `source_stats`, the source's LeRobot
    stats.json: a path (skipped when the file does not exist), its bytes, or its parsed
    dict; video is never decoded.

    Example (the converter, after writing the metadata, before publishing):
        >>> write_stats(tmp_out, source.stats_json())     # or source_root / "meta/stats.json"
    """
    root = Path(dataset_path)
    info = fmt.read_info(root)
    stats = compute_stats(root)
    source = _source_stats(source_stats)
    for cam in info.cameras:
        if cam in source:
            stats[cam] = FeatureStats.from_json(source[cam], f"source stats.json: {cam}")
    ordered = {k: stats[k] for k in [*info.cameras, *info.features] if k in stats}
    _write_sketch(root / SKETCH_PATH, ordered)
    fmt.write_json_atomic(root / fmt.STATS_PATH, {k: s.to_json() for k, s in ordered.items()})
    return ordered


def _source_stats(source: str | os.PathLike | bytes | Mapping[str, Any] | None) -> Mapping:
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return source
    if isinstance(source, bytes):
        try:
            raw = json.loads(source)
        except ValueError as e:
            raise DatasetError(f"source stats.json: unreadable ({e})") from e
        if not isinstance(raw, dict):
            raise DatasetError("source stats.json: expected a JSON object per feature")
        return raw
    path = Path(source)
    return _read_json(path) if path.is_file() else {}


def load_stats(dataset_path: str | os.PathLike) -> dict[str, FeatureStats]:
    """meta/stats.json of a dataset, with the histograms of meta/stats_sketch.npz attached
    (so `merge_stats` can merge quantiles) when the sketch matches the stats."""
    root = Path(dataset_path)
    path = root / fmt.STATS_PATH
    if not path.is_file():
        raise DatasetError(f"{path}: missing; compute it with jaxload.stats.compute.write_stats")
    stats = {k: FeatureStats.from_json(v, f"{path}: {k}") for k, v in _read_json(path).items()}
    sketch = _read_sketch(root / SKETCH_PATH)
    for key, (count, grids, error) in sketch.items():
        s = stats.get(key)
        if s is None or s.count != count or any(e.size != s.mean.size for e in error.values()):
            log.warning("%s: sketch of %r does not match stats.json; ignoring it", path, key)
            continue
        error = {q: e.reshape(s.shape) for q, e in error.items()}
        stats[key] = dataclasses.replace(s, grids=grids, quantile_error=error)
    return stats


def stats_to_json(stats: Mapping[str, FeatureStats]) -> dict[str, dict[str, list]]:
    """A stats mapping in LeRobot's stats.json structure."""
    return {k: s.to_json() for k, s in stats.items()}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DatasetError(f"{path}: unreadable ({e})") from e
    if not isinstance(raw, dict):
        raise DatasetError(f"{path}: expected a JSON object per feature")
    return raw


def _write_sketch(path: Path, stats: Mapping[str, FeatureStats]) -> None:
    arrays: dict[str, np.ndarray] = {"version": np.array(SKETCH_VERSION)}
    for key, s in stats.items():
        if not s.grids:
            continue
        arrays[f"{key}/count"] = np.array(s.count)
        for q, e in (s.quantile_error or {}).items():
            arrays[f"{key}/error/{q}"] = np.asarray(e).reshape(-1)
        for i, g in enumerate(s.grids):
            arrays |= {f"{key}/{i}/edges": g.edges, f"{key}/{i}/counts": g.counts}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_bytes(buffer.getvalue())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_sketch(path: Path) -> dict[str, tuple[int, tuple[Grid, ...], dict[str, np.ndarray]]]:
    if not path.is_file():
        return {}
    try:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        log.warning("%s: unreadable (%s); merged quantiles will be approximate", path, e)
        return {}
    if int(arrays.pop("version", -1)) != SKETCH_VERSION:
        log.warning("%s: unknown sketch version; ignoring it", path)
        return {}
    out = {}
    for name in (k[: -len("/count")] for k in arrays if k.endswith("/count")):
        grids, i = [], 0
        while f"{name}/{i}/edges" in arrays:
            grids.append(Grid(arrays[f"{name}/{i}/edges"], arrays[f"{name}/{i}/counts"]))
            i += 1
        error = {q: arrays[f"{name}/error/{q}"] for q in QUANTILES if f"{name}/error/{q}" in arrays}
        out[name] = (int(arrays[f"{name}/count"]), tuple(grids), error)
    return out
