"""What a converted dataset holds, under LeRobot's names: `DatasetMetadata` (`ds.meta`).

Modelled on `LeRobotDatasetMetadata`, so code written against LeRobot reads the same
values: `fps`, `total_frames`, `total_episodes`, `features`, `stats`, `tasks`,
`camera_keys`, `episodes`, `info`. It describes the whole dataset (as LeRobot's does),
whatever episodes a `jaxload.open(..., episodes=...)` view selects.

    >>> meta = jaxload.open("out/demo").meta          # or DatasetMetadata.load("out/demo")
    >>> meta.fps, meta.total_frames, meta.total_episodes
    (10, 20, 4)
    >>> meta.episodes[3]            # by episode_index
    {'episode_index': 3, 'length': 12, 'dataset_from_index': 8, 'dataset_to_index': 20, 'tasks': ['push the cube to the left edge']}
    >>> meta.stats["action"]["mean"].shape
    (4,)

Read-only: every access returns fresh values (editing them changes nothing here), and
the episode columns are read-only numpy arrays. Stats are read from `meta/stats.json`
on first use, so opening a dataset stays as fast as before.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from jaxload.format.episodes import Episodes
from jaxload.format.layout import DatasetInfo
from jaxload.format.storage import DatasetStorage, as_storage

# LeRobot's names for the axes of a camera feature (its meta/info.json, HWC).
CAMERA_NAMES = ["height", "width", "channels"]


class EpisodeTable:
    """One row per episode, in source order: LeRobot's `meta.episodes` columns
    `episode_index`, `length`, `dataset_from_index`, `dataset_to_index` (positions in
    `jaxload.open(path)` with every episode: the episode's frames are
    `ds[from:to]`) and `tasks`.

    `table["length"]` is a column (read-only array; `"tasks"`: a list of lists);
    `table[e]` is the row of the episode whose `episode_index` is `e` (a dict), as
    `LeRobotDatasetMetadata.episodes[e]` is; iterating yields the rows in order.
    """

    COLUMNS = ("episode_index", "length", "dataset_from_index", "dataset_to_index", "tasks")

    def __init__(self, episodes: Episodes):
        self._episodes = episodes  # the table's columns (shared, read-only)
        self._index = episodes.index
        self._length = episodes.length
        self._from = episodes.start
        self._to = _read_only(episodes.start + episodes.length)

    @functools.cached_property
    def _by_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(episode indices sorted, the row of each): rows by episode_index."""
        order = np.argsort(self._index, kind="stable")
        return self._index[order], order

    def __len__(self) -> int:
        return len(self._index)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self._row(r) for r in range(len(self)))

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, str):
            return self._column(key)
        if isinstance(key, bool) or not hasattr(key, "__index__"):
            raise TypeError(
                f"episode table index must be a column name or an episode_index, not "
                f"{type(key).__name__}"
            )
        ids, rows = self._by_index
        at = int(np.searchsorted(ids, int(key)))
        if at == len(ids) or ids[at] != int(key):
            raise IndexError(f"no episode {int(key)} (episodes: {_ids(self._index)})")
        return self._row(int(rows[at]))

    def _column(self, name: str) -> Any:
        columns = {
            "episode_index": self._index,
            "length": self._length,
            "dataset_from_index": self._from,
            "dataset_to_index": self._to,
        }
        if name == "tasks":
            return list(self._episodes.tasks)
        if name not in columns:
            raise KeyError(f"episode table has no column {name!r} (columns: {list(self.COLUMNS)})")
        return columns[name]

    def _row(self, row: int) -> dict[str, Any]:
        return {
            "episode_index": int(self._index[row]),
            "length": int(self._length[row]),
            "dataset_from_index": int(self._from[row]),
            "dataset_to_index": int(self._to[row]),
            "tasks": self._episodes.tasks[row],
        }

    def __repr__(self) -> str:
        return f"EpisodeTable({len(self)} episodes: {_ids(self._index)})"


class DatasetMetadata:
    """A converted dataset's metadata under `LeRobotDatasetMetadata`'s names.

    Example:
        >>> meta = DatasetMetadata.load("out/demo")
        >>> meta.camera_keys, meta.features["action"]["shape"]
        (['observation.images.top'], (4,))
        >>> meta.tasks
        {0: 'pick up the cube and put it in the bowl', 1: 'push the cube to the left edge'}

    `features` is LeRobot's info.json `features` dict: `{key: {"dtype", "shape",
    "names"}}` with shapes as tuples (`(1,)` for a scalar column, which a sample holds
    with shape `()`, as in LeRobot), cameras as `"video"` features of shape `(H, W, 3)`
    with the stored stream in `"info"`. `stats` is LeRobot's `meta.stats`:
    `{key: {"mean": array, "std", "min", "max", "count", "q01", ...}}` (`jaxload.stats.
    load_stats` gives the richer `FeatureStats`, with quantile error bounds). `tasks` maps
    task_index to the task string. `info` is the dataset's meta/info.json as a dict.
    """

    def __init__(
        self,
        root: str | os.PathLike | DatasetStorage,
        info: DatasetInfo,
        episodes: EpisodeTable,
        tasks: Mapping[int, str],
    ):
        self.storage = as_storage(root)  # where the files are (stats are read on first use)
        self.root = self.storage.name
        self._info = info
        self.episodes = episodes
        self._tasks = dict(tasks)

    @classmethod
    def load(cls, root: str | os.PathLike | DatasetStorage) -> DatasetMetadata:
        """The metadata of the converted dataset at `root` (its meta/ files only)."""
        from jaxload.format.reader import read_episodes, read_info, read_tasks

        info = read_info(root)
        return cls(root, info, EpisodeTable(read_episodes(root, info)), read_tasks(root))

    # --- LeRobotDatasetMetadata's names ------------------------------------------------

    @property
    def fps(self) -> int:
        return self._info.fps

    @property
    def total_frames(self) -> int:
        return self._info.total_frames

    @property
    def total_episodes(self) -> int:
        return self._info.total_episodes

    @property
    def total_tasks(self) -> int:
        return len(self._tasks)

    @property
    def robot_type(self) -> str | None:
        return self._info.source.get("robot_type")

    @property
    def camera_keys(self) -> list[str]:
        """Camera keys, sorted (every camera is stored as video)."""
        return sorted(self._info.cameras)

    @property
    def video_keys(self) -> list[str]:
        return self.camera_keys

    @property
    def image_keys(self) -> list[str]:
        """Always empty: the converter stores LeRobot `image` features as video too."""
        return []

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return lerobot_features(self._info)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: f["shape"] for k, f in self.features.items()}

    @property
    def names(self) -> dict[str, Any]:
        return {k: f["names"] for k, f in self.features.items()}

    @property
    def tasks(self) -> dict[int, str]:
        return dict(self._tasks)

    @property
    def info(self) -> dict[str, Any]:
        return self._info.to_json()

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """meta/stats.json as numpy arrays (LeRobot's shapes), loaded on first use."""
        return {k: {n: v.copy() for n, v in entry.items()} for k, entry in self._stats.items()}

    @functools.cached_property
    def _stats(self) -> dict[str, dict[str, np.ndarray]]:
        from jaxload.stats.feature_stats import QUANTILES, STAT_ORDER
        from jaxload.stats.store import load_stats

        out = {}
        for key, s in load_stats(self.storage, sketch=False).items():
            names = [n for n in STAT_ORDER if n not in QUANTILES or n in s.quantiles]
            out[key] = {n: np.asarray(s.get(n)) for n in names}
        return out

    def __repr__(self) -> str:
        return (
            f"DatasetMetadata({self.root!r}, fps={self.fps}, frames={self.total_frames}, "
            f"episodes={self.total_episodes}, tasks={self.total_tasks}, "
            f"cameras={self.camera_keys})"
        )


def lerobot_features(info: DatasetInfo) -> dict[str, dict[str, Any]]:
    """info.json's features in LeRobot's form: cameras first (as LeRobot lists them), as
    `"video"` features with their stored stream; a scalar column has shape `(1,)`."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(info.cameras):
        cam = info.cameras[key]
        out[key] = {
            "dtype": "video",
            "shape": (cam.height, cam.width, 3),
            "names": list(CAMERA_NAMES),
            "info": {
                "video.height": cam.height,
                "video.width": cam.width,
                "video.codec": cam.codec,
                "video.pix_fmt": cam.pix_fmt,
                "video.fps": info.fps,
                "video.channels": 3,
            },
        }
    for key, feature in info.features.items():
        out[key] = {
            "dtype": feature.dtype,
            "shape": tuple(feature.shape) or (1,),
            "names": copy.deepcopy(feature.names),
        }
    return out


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _ids(index: np.ndarray, limit: int = 8) -> str:
    """Episode ids for a message: a range when contiguous, else the first few."""
    if len(index) and np.array_equal(index, np.arange(index[0], index[0] + len(index))):
        return f"{int(index[0])}..{int(index[-1])}"
    ids = index.tolist()
    return ", ".join(map(str, ids[:limit])) + (", ..." if len(ids) > limit else "")


def shape_dtype_structs(spec: Mapping[str, tuple[tuple[int, ...], Any]]) -> dict[str, Any]:
    """`{key: (shape, dtype)}` -> `{key: jax.ShapeDtypeStruct}` (JAX imported on use)."""
    import jax

    return {
        k: jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype)) for k, (shape, dtype) in spec.items()
    }
