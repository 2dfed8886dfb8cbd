"""Reads a LeRobot codebase v3.0 dataset from a local directory.

Layout (as lerobot 0.4.x writes it): meta/info.json, meta/episodes/chunk-*/file-*.parquet
(one row per episode: frame range, data file, per-camera video file and time range),
meta/tasks.parquet, meta/stats.json, data/chunk-*/file-*.parquet (frames of several
episodes), videos/<key>/chunk-*/file-*.mp4 (several episodes concatenated per file).

Every check raises `SourceError` naming the file and episode, so the converter and
`jaxload doctor` share them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jaxload.errors import SourceError

SUPPORTED_VERSIONS = ("v3.0",)
# Columns every LeRobot data file has; they are stored but are not user features.
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


@dataclasses.dataclass(frozen=True)
class VideoSpan:
    """Where one episode's frames of one camera are: a file and a time range in it."""

    path: Path
    from_timestamp: float
    to_timestamp: float


class LeRobotV3Source:
    """A LeRobot v3.0 dataset directory.

    Example:
        >>> src = LeRobotV3Source("data/pusht")
        >>> src.fps, src.num_episodes, src.camera_keys
        (10, 206, ['observation.image'])
        >>> table = src.episode_frames(0)   # pyarrow.Table of the episode's rows
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.info = read_info(self.root)
        self.fps = int(self.info["fps"])
        self.features: dict[str, Any] = self.info["features"]
        self.camera_keys = camera_keys(self.info)
        self.episodes = read_episodes(self.root, self.info)
        self.tasks = read_tasks(self.root)
        self._row_of = {ep: i for i, ep in enumerate(self.episodes["episode_index"].to_pylist())}

    # --- per episode ------------------------------------------------------------------

    @property
    def num_episodes(self) -> int:
        return self.episodes.num_rows

    @property
    def episode_ids(self) -> list[int]:
        return self.episodes["episode_index"].to_pylist()

    def row(self, episode: int) -> dict[str, Any]:
        """The meta/episodes row of LeRobot episode `episode`."""
        if episode not in self._row_of:
            raise SourceError(f"{self.root}: no episode {episode}")
        return self.episodes.slice(self._row_of[episode], 1).to_pylist()[0]

    def data_path(self, row: dict[str, Any]) -> Path:
        rel = self.info["data_path"].format(
            chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )
        return self.root / rel

    def video_span(self, row: dict[str, Any], camera: str) -> VideoSpan:
        rel = self.info["video_path"].format(
            video_key=camera,
            chunk_index=row[f"videos/{camera}/chunk_index"],
            file_index=row[f"videos/{camera}/file_index"],
        )
        return VideoSpan(
            self.root / rel,
            float(row[f"videos/{camera}/from_timestamp"]),
            float(row[f"videos/{camera}/to_timestamp"]),
        )

    def episode_frames(self, episode: int) -> pa.Table:
        """The data rows of one episode, checked against the episode metadata."""
        row = self.row(episode)
        path = self.data_path(row)
        table = read_data_file(path)
        index = table["index"]
        mask = pc.and_(
            pc.greater_equal(index, row["dataset_from_index"]),
            pc.less(index, row["dataset_to_index"]),
        )
        frames = table.filter(mask)
        _check_episode_rows(frames, row, path)
        return frames

    def tabular_columns(self, column_names: list[str]) -> list[str]:
        """Columns stored per frame: declared non-video features, then the index columns."""
        declared = [k for k, f in self.features.items() if f["dtype"] != "video"]
        return [
            *(k for k in declared if k not in INDEX_COLUMNS),
            *(k for k in INDEX_COLUMNS if k in column_names),
        ]


def camera_keys(info: dict[str, Any]) -> list[str]:
    return sorted(k for k, f in info["features"].items() if f.get("dtype") == "video")


def read_info(root: Path) -> dict[str, Any]:
    """meta/info.json, checked for the fields and feature types jaxload needs."""
    if not root.is_dir():
        raise SourceError(f"{root}: no such dataset directory")
    path = root / "meta" / "info.json"
    if not path.is_file():
        raise SourceError(f"{path}: missing; {root} is not a LeRobot dataset")
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SourceError(f"{path}: not valid JSON ({e})") from e
    version = info.get("codebase_version")
    if version not in SUPPORTED_VERSIONS:
        raise SourceError(
            f"{path}: codebase_version {version!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_VERSIONS)})"
        )
    for key in ("fps", "features", "total_frames", "total_episodes", "data_path"):
        if key not in info:
            raise SourceError(f"{path}: required field {key!r} missing")
    if camera_keys(info) and "video_path" not in info:
        raise SourceError(f"{path}: has video features but no 'video_path'")
    for key, feature in info["features"].items():
        if feature.get("dtype") in ("image", "string"):
            raise SourceError(
                f"{path}: feature {key!r} has dtype {feature['dtype']!r}, which jaxload does "
                "not convert yet (supported: numeric and bool tabular features, video)"
            )
    return info


def read_episodes(root: Path, info: dict[str, Any]) -> pa.Table:
    """meta/episodes/*/*.parquet without stats, sorted, checked to tile the frames."""
    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if not files:
        raise SourceError(f"{root / 'meta' / 'episodes'}: no episode metadata files")
    tables = [_read_parquet(f).drop_columns(_stats_columns(f)) for f in files]
    try:
        table = pa.concat_tables(tables, promote_options="default")
    except pa.ArrowInvalid as e:
        raise SourceError(f"{files[0].parent}: episode files disagree on schema ({e})") from e
    table = table.sort_by("episode_index")
    _check_episode_columns(table, camera_keys(info), files[0])
    _check_tiling(table, info, root / "meta" / "episodes")
    return table


def read_tasks(root: Path) -> dict[int, str]:
    path = root / "meta" / "tasks.parquet"
    table = _read_parquet(path)
    if "task_index" not in table.column_names:
        raise SourceError(f"{path}: no task_index column")
    # lerobot stores the task string as the pandas index.
    name = next((c for c in ("task", "__index_level_0__") if c in table.column_names), None)
    if name is None:
        raise SourceError(f"{path}: no task string column")
    return dict(zip(table["task_index"].to_pylist(), table[name].to_pylist()))


def _check_episode_columns(table: pa.Table, cameras: list[str], where: Path) -> None:
    required = [
        "episode_index",
        "length",
        "dataset_from_index",
        "dataset_to_index",
        "tasks",
        "data/chunk_index",
        "data/file_index",
    ]
    for cam in cameras:
        required += [
            f"videos/{cam}/{c}"
            for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
        ]
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise SourceError(f"{where}: episode metadata lacks columns {missing}")


def _check_tiling(table: pa.Table, info: dict[str, Any], where: Path) -> None:
    """Episode frame ranges must tile [0, total_frames) in episode order."""
    ep = table["episode_index"].to_numpy()
    start = table["dataset_from_index"].to_numpy()
    stop = table["dataset_to_index"].to_numpy()
    length = table["length"].to_numpy()
    if len(np.unique(ep)) != len(ep):
        dup = ep[np.flatnonzero(np.diff(ep) == 0)[0]]
        raise SourceError(f"{where}: episode {dup} is listed twice")
    for i in range(len(ep)):
        expected_start = 0 if i == 0 else stop[i - 1]
        if start[i] != expected_start:
            kind = "overlaps the previous one" if start[i] < expected_start else "leaves a gap"
            raise SourceError(
                f"{where}: episode {ep[i]} starts at frame {start[i]} but the previous "
                f"episode ends at {expected_start}: its range {kind}"
            )
        if stop[i] - start[i] != length[i] or length[i] <= 0:
            raise SourceError(
                f"{where}: episode {ep[i]} has length {length[i]} but frame range "
                f"[{start[i]}, {stop[i]})"
            )
    total = int(info["total_frames"])
    if len(ep) and stop[-1] != total:
        raise SourceError(
            f"{where}: episodes cover {stop[-1]} frames but meta/info.json says "
            f"total_frames={total}"
        )
    if len(ep) != int(info["total_episodes"]):
        raise SourceError(
            f"{where}: {len(ep)} episodes but meta/info.json says "
            f"total_episodes={info['total_episodes']}"
        )


def _check_episode_rows(frames: pa.Table, row: dict[str, Any], path: Path) -> None:
    ep, length = row["episode_index"], row["length"]
    if frames.num_rows != length:
        raise SourceError(
            f"{path}: episode {ep} should have {length} rows (index {row['dataset_from_index']}"
            f"..{row['dataset_to_index'] - 1}) but the file holds {frames.num_rows}"
        )
    index = frames["index"].to_numpy()
    if np.any(np.diff(index) != 1):
        raise SourceError(f"{path}: episode {ep}: column 'index' is not sorted and contiguous")
    if np.any(frames["episode_index"].to_numpy() != ep):
        raise SourceError(f"{path}: rows of index {index[0]}..{index[-1]} are not episode {ep}")
    if np.any(frames["frame_index"].to_numpy() != np.arange(length)):
        raise SourceError(f"{path}: episode {ep}: frame_index is not 0..{length - 1}")


@functools.lru_cache(maxsize=2)
def read_data_file(path: Path) -> pa.Table:
    """Data files hold many episodes; a worker converting them in order reads each once."""
    table = _read_parquet(path)
    for col in ("index", "episode_index", "frame_index", "timestamp"):
        if col not in table.column_names:
            raise SourceError(f"{path}: column {col!r} missing")
    return table


def _read_parquet(path: Path) -> pa.Table:
    if not path.is_file():
        raise SourceError(f"{path}: missing")
    try:
        return pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise SourceError(f"{path}: unreadable parquet ({e})") from e


def _stats_columns(path: Path) -> list[str]:
    return [n for n in pq.read_schema(path).names if n.startswith("stats/")]
