"""Per-task speed buckets: how long an episode is compared with the other episodes of its task.

For each task of a dataset (an episode's task is the first of its tasks), the boundaries
p5, p15, ..., p95 of its episodes' lengths in frames (numpy's linear percentiles) split
lengths into deciles; an episode's label is 10 x the number of boundaries <= its length:

    length <  p5          -> 0
    p5  <= length < p15   -> 10   (a length equal to a boundary lands in the upper bucket)
    ...
    length >= p95         -> 100

A task with fewer than 10 distinct lengths has no meaningful deciles: all its episodes get 50.

The boundaries are persisted once per dataset in meta/speed_buckets.json (schema_version,
num_episodes they were computed from, per task). Loading (`load_buckets`):

* file present with this schema: used as is, also when the dataset's episode count no
  longer matches (then process 0 logs one warning; delete the file to recompute);
* missing: computed; process 0 writes it atomically (unique temp name + os.replace, so
  many processes starting at once leave one valid file), the others keep it in memory;
  a read-only dataset directory falls back to memory with one warning;
* another schema version: computed in memory (one warning), the file is left alone.

Example (out/demo: 4 episodes of 5, 1, 2 and 12 frames, two tasks: too few lengths):
    >>> from jaxload.stats.speed import speed_labels
    >>> speed_labels("out/demo", process_index=0)   # one label per episode, metadata order
    array([50, 50, 50, 50])
    >>> ds = jaxload.open("out/demo", episodes=[3, 0])
    >>> speed_labels(ds, process_index=0)           # a JaxloadDataset: its selected episodes
    array([50, 50])
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.errors import DatasetError
from jaxload.format.reader import read_episodes, read_info
from jaxload.format.storage import DatasetStorage, as_storage

log = logging.getLogger("jaxload.stats.speed")

SCHEMA_VERSION = 1
SPEED_PATH = "meta/speed_buckets.json"
PERCENTILES = tuple(range(5, 100, 10))  # p5, p15, ..., p95
MIN_DISTINCT_LENGTHS = 10
SPARSE_LABEL = 50  # label of every episode of a task with too few distinct lengths
LABELS = tuple(range(0, 101, 10))


@dataclasses.dataclass(frozen=True)
class TaskBuckets:
    """The decile boundaries of one task's episode lengths (None: too few distinct lengths)."""

    num_episodes: int
    distinct_lengths: int
    boundaries: tuple[float, ...] | None

    def labels(self, lengths: np.ndarray) -> np.ndarray:
        if self.boundaries is None:
            return np.full(len(lengths), SPARSE_LABEL, dtype=np.int64)
        edges = np.asarray(self.boundaries, dtype=np.float64)
        return 10 * np.searchsorted(edges, np.asarray(lengths, np.float64), side="right")


@dataclasses.dataclass(frozen=True)
class SpeedBuckets:
    """Boundaries per task of one dataset, and how many episodes they come from."""

    num_episodes: int
    tasks: dict[str, TaskBuckets]

    def labels(self, lengths: Sequence[int], tasks: Sequence[str]) -> np.ndarray:
        """Label of each episode (length in frames, task). A task the buckets do not know
        (a stale file) is treated as too sparse: 50."""
        lengths, tasks = np.asarray(lengths, dtype=np.int64), np.asarray(tasks, dtype=object)
        out = np.full(len(lengths), SPARSE_LABEL, dtype=np.int64)
        for task in set(tasks.tolist()):
            if task in self.tasks:
                where = tasks == task
                out[where] = self.tasks[task].labels(lengths[where])
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "num_episodes": self.num_episodes,
            "percentiles": list(PERCENTILES),
            "method": "linear percentiles (numpy's default) of episode lengths in frames, "
            "per episode's first task",
            "min_distinct_lengths": MIN_DISTINCT_LENGTHS,
            "tasks": {
                task: {
                    "num_episodes": b.num_episodes,
                    "distinct_lengths": b.distinct_lengths,
                    "boundaries": None if b.boundaries is None else list(b.boundaries),
                }
                for task, b in self.tasks.items()
            },
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], where: str) -> SpeedBuckets:
        try:
            tasks = {}
            for task, entry in raw["tasks"].items():
                bounds = entry["boundaries"]
                if bounds is not None:
                    bounds = tuple(float(b) for b in bounds)
                    if len(bounds) != len(PERCENTILES) or list(bounds) != sorted(bounds):
                        raise ValueError(f"task {task!r}: boundaries {list(bounds)}")
                tasks[str(task)] = TaskBuckets(
                    int(entry["num_episodes"]), int(entry["distinct_lengths"]), bounds
                )
            return cls(int(raw["num_episodes"]), tasks)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DatasetError(
                f"{where}: malformed speed buckets ({type(e).__name__}: {e}); delete the file "
                "to recompute it"
            ) from e


def compute_buckets(lengths: Sequence[int], tasks: Sequence[str]) -> SpeedBuckets:
    """Boundaries per task from every episode's length in frames and (first) task."""
    lengths, tasks = np.asarray(lengths, dtype=np.int64), np.asarray(tasks, dtype=object)
    out = {}
    for task in dict.fromkeys(tasks.tolist()):  # first-appearance order
        mine = lengths[tasks == task]
        distinct = len(np.unique(mine))
        bounds = _percentiles(mine) if distinct >= MIN_DISTINCT_LENGTHS else None
        out[task] = TaskBuckets(len(mine), distinct, bounds)
    return SpeedBuckets(len(lengths), out)


def _percentiles(lengths: np.ndarray) -> tuple[float, ...]:
    """numpy's linear percentiles p5..p95 of integer lengths, computed exactly: the
    boundary x_i + r/100 (x_{i+1} - x_i), with i, r from q (n - 1) = 100 i + r, has an
    integer numerator, so one rounding at most and a boundary that is an integer is that
    integer (np.percentile can return 120.00000000000001, moving 120 down a bucket)."""
    x = np.sort(lengths.astype(np.int64))
    out = []
    for q in PERCENTILES:
        i, r = divmod(q * (len(x) - 1), 100)
        upper = x[min(i + 1, len(x) - 1)]
        out.append(float(100 * int(x[i]) + r * int(upper - x[i])) / 100)
    return tuple(out)


# --- per dataset -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Episodes:
    index: np.ndarray  # episode_index, metadata order
    lengths: np.ndarray
    tasks: np.ndarray  # first task of each episode (object array of str)


def _read_episodes(storage: DatasetStorage) -> _Episodes:
    episodes = read_episodes(storage, read_info(storage))
    return _Episodes(episodes.index, episodes.length, episodes.tasks.firsts(""))


def load_buckets(dataset: Any, *, process_index: int | None = None) -> SpeedBuckets:
    """The speed buckets of a dataset (a path or a JaxloadDataset): from
    meta/speed_buckets.json, or computed (and written by process 0) when it is missing.

    `process_index` defaults to `jax.process_index()`; only process 0 writes and warns.
    """
    storage = _storage(dataset)
    episodes = _read_episodes(storage)
    main = (_jax_process_index() if process_index is None else int(process_index)) == 0
    path = storage.where(SPEED_PATH)
    raw = _read_json(storage, SPEED_PATH)
    if raw is not None and raw.get("schema_version") == SCHEMA_VERSION:
        stored = SpeedBuckets.from_json(raw, path)
        if stored.num_episodes != len(episodes.index) and main:
            _warn_once(
                ("stale", str(path)),
                "%s: computed from %d episodes but the dataset has %d; using it anyway "
                "(delete it to recompute)",
                path,
                stored.num_episodes,
                len(episodes.index),
            )
        return stored
    buckets = compute_buckets(episodes.lengths, episodes.tasks)
    if raw is not None:  # another schema: leave that file to the jaxload that wrote it
        if main:
            _warn_once(
                ("schema", str(path)),
                "%s: schema_version %r, this jaxload reads %d; computing in memory "
                "(delete it to rewrite)",
                path,
                raw.get("schema_version"),
                SCHEMA_VERSION,
            )
    elif main:
        write_buckets(storage, buckets)
    return buckets


def write_buckets(where: str | os.PathLike | DatasetStorage, buckets: SpeedBuckets) -> bool:
    """Writes meta/speed_buckets.json atomically (unique temp name, then os.replace: many
    concurrent writers leave one valid file). A read-only dataset (or one in object
    storage) logs one warning and returns False: the buckets are kept in memory."""
    storage = as_storage(where)
    path = storage.where(SPEED_PATH)
    data = (json.dumps(buckets.to_json(), indent=2) + "\n").encode()
    try:
        storage.write(SPEED_PATH, data)
    except OSError as e:  # read-only dataset (permissions, read-only mount, a URL)
        _warn_once(
            ("readonly", str(path)),
            "%s: cannot write (%s); speed buckets are kept in memory",
            path,
            e.strerror or e,
        )
        return False
    return True


def speed_labels(
    dataset: Any,
    episodes: Iterable[int] | None = None,
    *,
    process_index: int | None = None,
) -> np.ndarray:
    """Speed label (0, 10, ..., 100) of each episode, int64, in the order of `episodes`
    (episode_index values). Default: a JaxloadDataset's selected episodes, or every
    episode of a dataset path in metadata order.

    Example (a per-sample `speed` key in a reader)::

        labels = speed_labels(ds)                   # aligned with ds.episode_index
        sample["speed"] = labels[episode_position]
    """
    storage = _storage(dataset)
    info = _read_episodes(storage)
    if episodes is None:  # a path's every episode, a dataset's selected ones
        episodes = info.index if _is_location(dataset) else dataset.episode_index
    wanted = np.asarray(list(episodes), dtype=np.int64)
    order = np.argsort(info.index, kind="stable")
    pos = np.searchsorted(info.index[order], wanted)
    missing = (pos >= len(order)) | (info.index[order][np.minimum(pos, len(order) - 1)] != wanted)
    if missing.any():
        raise DatasetError(
            f"{storage.name}: episodes {wanted[missing].tolist()} not in this dataset"
        )
    rows = order[pos]
    buckets = load_buckets(storage, process_index=process_index)
    return buckets.labels(info.lengths[rows], info.tasks[rows])


def _storage(dataset: Any) -> DatasetStorage:
    """Where a dataset's files are: a path's directory, or a JaxloadDataset's storage."""
    if _is_location(dataset):
        return as_storage(dataset)
    return dataset.storage


def _is_location(dataset: Any) -> bool:
    """A path or a DatasetStorage (not an opened dataset)."""
    return isinstance(dataset, str | os.PathLike | DatasetStorage)


def _jax_process_index() -> int:
    import jax  # only here: writers that pass process_index never import jax

    return jax.process_index()


def _read_json(storage: DatasetStorage, relative: str) -> dict[str, Any] | None:
    """The file's JSON object, or None when there is no file."""
    path = storage.where(relative)
    try:
        data = storage.read(relative)
        if data is None:
            return None
        raw = json.loads(data)
    except (DatasetError, ValueError) as e:
        raise DatasetError(f"{path}: unreadable ({e}); delete it to recompute") from e
    if not isinstance(raw, dict):
        raise DatasetError(f"{path}: not a JSON object; delete it to recompute")
    return raw


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _warn_once(key: tuple[str, str], message: str, *args: Any) -> None:
    """One warning per (kind, file) per process, however often datasets are opened."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, *args)
