"""Reads a LeRobot codebase v3.0 dataset.

Layout (as lerobot 0.4.x writes it): meta/info.json, meta/episodes/chunk-*/file-*.parquet
(one row per episode: frame range, data file, per-camera video file and time range),
meta/tasks.parquet, meta/stats.json, data/chunk-*/file-*.parquet (frames of several
episodes), videos/<key>/chunk-*/file-*.mp4 (several episodes concatenated per file).

Every check raises `SourceError` naming the file and episode, so the converter and
`jaxload doctor` share them.
"""

from __future__ import annotations

import collections
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jaxload.converters.files import Files, LocalFiles
from jaxload.converters.lerobot_common import (
    Episode,
    LeRobotSource,
    VideoSpan,
    read_parquet,
    video_keys,
)
from jaxload.errors import SourceError

SUPPORTED_VERSIONS = ("v3.0",)
EPISODES_GLOB = "meta/episodes/chunk-*/file-*.parquet"


class LeRobotV3Source(LeRobotSource):
    """A LeRobot v3.0 dataset (a directory, or any `Files`).

    Example:
        >>> src = LeRobotV3Source("data/demo")
        >>> src.fps, src.num_episodes, src.camera_keys
        (10, 4, ['observation.images.top'])
        >>> src.episode_frames(0).num_rows   # a pyarrow.Table of the episode's rows
        5
    """

    SUPPORTED_VERSIONS = SUPPORTED_VERSIONS

    def __init__(self, files: Files | str | os.PathLike):
        super().__init__(files if isinstance(files, Files) else LocalFiles(files))
        self.episodes = read_episodes(self.files, self.info)
        self._tasks = read_tasks(self.files)
        self._rows = {r["episode_index"]: r for r in self.episodes.to_pylist()}
        self._ids = list(self._rows)

    @property
    def episode_ids(self) -> list[int]:
        return self._ids

    @property
    def tasks(self) -> dict[int, str]:
        return self._tasks

    def _row(self, episode: int) -> dict[str, Any]:
        if episode not in self._rows:
            raise SourceError(f"{self.root}: no episode {episode}")
        return self._rows[episode]

    def episode(self, episode: int) -> Episode:
        row = self._row(episode)
        return Episode(
            int(row["episode_index"]),
            int(row["length"]),
            int(row["dataset_from_index"]),
            tuple(row["tasks"]),
        )

    def data_file(self, episode: int) -> str:
        row = self._row(episode)
        return self.path_of(
            "data_path", chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )

    def video_span(self, episode: int, camera: str) -> VideoSpan:
        row = self._row(episode)
        rel = self.path_of(
            "video_path",
            video_key=camera,
            chunk_index=row[f"videos/{camera}/chunk_index"],
            file_index=row[f"videos/{camera}/file_index"],
        )
        return VideoSpan(
            rel,
            float(row[f"videos/{camera}/from_timestamp"]),
            float(row[f"videos/{camera}/to_timestamp"]),
        )

    def episode_frames(self, episode: int) -> pa.Table:
        ep = self.episode(episode)
        rel = self.data_file(episode)
        table = self.read_data_file(rel, f"data file of episode {episode}")
        index = table["index"]
        mask = pc.and_(pc.greater_equal(index, ep.start), pc.less(index, ep.start + ep.length))
        frames = table.filter(mask)
        self.check_episode_rows(frames, ep, rel)
        return frames

    def stats_json(self) -> bytes | None:
        rel = "meta/stats.json"
        return self.files.read_bytes(rel) if self.files.exists(rel) else None

    def meta_files(self) -> list[str]:
        return ["meta/info.json", *self.files.glob(EPISODES_GLOB), "meta/tasks.parquet"]

    def data_file_rows(self) -> dict[str, int]:
        rows: collections.Counter[str] = collections.Counter()
        for ep in self.episode_ids:
            rows[self.data_file(ep)] += self.episode(ep).length
        return dict(rows)


def read_episodes(files: Files, info: dict[str, Any]) -> pa.Table:
    """meta/episodes/*/*.parquet without stats, sorted, checked to tile the frames."""
    rels = files.glob(EPISODES_GLOB)
    where = files.describe("meta/episodes")
    if not rels:
        raise SourceError(f"{where}: no episode metadata files")
    tables = [_read_without_stats(files, rel) for rel in rels]
    try:
        table = pa.concat_tables(tables, promote_options="default")
    except pa.ArrowInvalid as e:
        raise SourceError(f"{where}: episode files disagree on schema ({e})") from e
    table = table.sort_by("episode_index")
    _check_episode_columns(table, video_keys(info), files.describe(rels[0]))
    _check_tiling(table, info, where)
    return table


def read_tasks(files: Files) -> dict[int, str]:
    rel = "meta/tasks.parquet"
    where = files.describe(rel)
    if not files.exists(rel):
        raise SourceError(f"{where}: missing")
    table = read_parquet(files.local(rel), where)
    if "task_index" not in table.column_names:
        raise SourceError(f"{where}: no task_index column")
    # lerobot stores the task string as the pandas index.
    name = next((c for c in ("task", "__index_level_0__") if c in table.column_names), None)
    if name is None:
        raise SourceError(f"{where}: no task string column")
    return dict(zip(table["task_index"].to_pylist(), table[name].to_pylist()))


def _read_without_stats(files: Files, rel: str) -> pa.Table:
    path, where = files.local(rel), files.describe(rel)
    try:
        names = pq.read_schema(path).names
        return pq.read_table(path, columns=[n for n in names if not n.startswith("stats/")])
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise SourceError(f"{where}: unreadable parquet ({e})") from e


def _check_episode_columns(table: pa.Table, cameras: list[str], where: str) -> None:
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


def _check_tiling(table: pa.Table, info: dict[str, Any], where: str) -> None:
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
