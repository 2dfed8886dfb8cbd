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
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
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
# A meta/episodes file with a larger footer is read in a child process. pyarrow expands a
# parquet footer about 8x when it opens a file and does not give that memory back to the
# OS: lerobot writes 10 episodes per row group, and 100k episodes make a 106 MB footer,
# 870 MB once parsed (benchmarks/bench_scale.py). The child returns only the columns used.
INLINE_FOOTER_BYTES = 16 << 20


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

    @property
    def episode_ids(self) -> list[int]:
        return self.episodes.index.tolist()

    @property
    def tasks(self) -> dict[int, str]:
        return self._tasks

    def episode(self, episode: int) -> Episode:
        row = self.episodes.row(episode, self.root)
        return Episode(
            int(self.episodes.index[row]),
            int(self.episodes.length[row]),
            int(self.episodes.start[row]),
            self.episodes.tasks[row],
        )

    def data_file(self, episode: int) -> str:
        row = self.episodes.row(episode, self.root)
        chunk, file = self.episodes.files["data"][:, row]
        return self.path_of("data_path", chunk_index=int(chunk), file_index=int(file))

    def video_span(self, episode: int, camera: str) -> VideoSpan:
        row = self.episodes.row(episode, self.root)
        chunk, file = self.episodes.files[camera][:, row]
        rel = self.path_of(
            "video_path", video_key=camera, chunk_index=int(chunk), file_index=int(file)
        )
        begin, end = self.episodes.spans[camera][:, row]
        return VideoSpan(rel, float(begin), float(end))

    def episode_frames(self, episode: int) -> pa.Table:
        ep = self.episode(episode)
        rel = self.data_file(episode)
        frames = self.open_data_file(rel, f"data file of episode {episode}").rows(
            ep.start, ep.length
        )
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


class SourceEpisodes:
    """LeRobot's episode metadata as numpy columns, sorted by episode_index: what the
    converter needs of each episode (no per-episode stats, no Python object per episode
    but its tasks).

    `files[key]` is (chunk_index, file_index) per episode, shape (2, n), for "data" and
    each camera; `spans[camera]` (from_timestamp, to_timestamp), shape (2, n).
    """

    def __init__(self, table: pa.Table, cameras: Sequence[str]):
        def ints(name: str) -> np.ndarray:
            return table[name].to_numpy().astype(np.int64)

        self.index, self.length = ints("episode_index"), ints("length")
        self.start, self.stop = ints("dataset_from_index"), ints("dataset_to_index")
        self.files = {"data": np.stack([ints("data/chunk_index"), ints("data/file_index")])}
        self.spans = {}
        for cam in cameras:
            prefix = f"videos/{cam}"
            self.files[cam] = np.stack(
                [ints(f"{prefix}/chunk_index"), ints(f"{prefix}/file_index")]
            )
            self.spans[cam] = np.stack(
                [
                    table[f"{prefix}/{t}_timestamp"].to_numpy().astype(np.float64)
                    for t in ("from", "to")
                ]
            )
        self.tasks = [tuple(t or ()) for t in table["tasks"].to_pylist()]

    def __len__(self) -> int:
        return len(self.index)

    def row(self, episode: int, root: str) -> int:
        """The row of episode `episode`; a SourceError when there is none."""
        row = int(np.searchsorted(self.index, episode))
        if row == len(self.index) or self.index[row] != episode:
            raise SourceError(f"{root}: no episode {episode}")
        return row


def read_episodes(files: Files, info: dict[str, Any]) -> SourceEpisodes:
    """meta/episodes/*/*.parquet without stats, sorted, checked to tile the frames."""
    rels = files.glob(EPISODES_GLOB)
    where = files.describe("meta/episodes")
    if not rels:
        raise SourceError(f"{where}: no episode metadata files")
    tables = [_read_without_stats(files, rel) for rel in rels]
    try:
        table = pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:  # a column's type differs: TypeError
        raise SourceError(f"{where}: episode files disagree on schema ({e})") from e
    table = table.sort_by("episode_index")
    _check_episode_columns(table, video_keys(info), files.describe(rels[0]))
    _check_tiling(table, info, where)
    return SourceEpisodes(table, video_keys(info))


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
    if _footer_bytes(path) > INLINE_FOOTER_BYTES:
        import concurrent.futures
        import multiprocessing

        spawn = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as child:
            return child.submit(_read_columns, path, where).result()
    return _read_columns(path, where)


def _read_columns(path: os.PathLike, where: str) -> pa.Table:
    """A meta/episodes file's columns but the per-episode stats."""
    try:
        file = pq.ParquetFile(path)
        names = [n for n in file.schema_arrow.names if not n.startswith("stats/")]
        return file.read(columns=names)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise SourceError(f"{where}: unreadable parquet ({e})") from e


def _footer_bytes(path: os.PathLike) -> int:
    """The size of a parquet file's footer (0 when the file does not end like one)."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 8))
        tail = f.read(8)
    return int.from_bytes(tail[:4], "little") if len(tail) == 8 and tail[4:] == b"PAR1" else 0


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
    empty = [c for c in required if c != "tasks" and table[c].null_count]
    if empty:
        raise SourceError(f"{where}: episode metadata has missing values in columns {empty}")
    for column in required:
        if column != "tasks" and not column.endswith("_timestamp"):
            _check_integers(table[column], column, where)


def _check_integers(values: Any, column: str, where: str) -> None:
    """An index column must hold integers: a chunk or file index is filled into a path
    template, so a string there (`'../../../outside_data/chunk-000'`) would name a file
    outside the dataset (it was a raw `ValueError: invalid literal for int()`)."""
    if pa.types.is_integer(values.type):
        return
    if pa.types.is_floating(values.type):  # whole numbers stored as floats convert as before
        numbers = values.to_numpy()
        wrong = np.flatnonzero(~(np.isfinite(numbers) & (numbers == np.round(numbers))))
        if not wrong.size:
            return
        bad = numbers[wrong[0]].item()  # the first value that is no integer, not 0.0
    else:
        bad = next(
            (v for v in values.to_pylist() if not isinstance(v, int) or isinstance(v, bool)),
            None,
        )
    text = str(bad)
    if "/" in text or "\\" in text or ".." in text or ":" in text:
        raise SourceError(
            f"{where}: column {column} holds {bad!r}, a path that points outside the dataset; "
            "refusing to read it (an index column holds integers)"
        )
    raise SourceError(
        f"{where}: column {column} holds {values.type} values such as {bad!r}, not integers"
    )


def _check_tiling(table: pa.Table, info: dict[str, Any], where: str) -> None:
    """Episode frame ranges must tile [0, total_frames) in episode order."""
    ep = table["episode_index"].to_numpy()
    start = table["dataset_from_index"].to_numpy()
    stop = table["dataset_to_index"].to_numpy()
    length = table["length"].to_numpy()
    if len(np.unique(ep)) != len(ep):
        dup = ep[np.flatnonzero(np.diff(ep) == 0)[0]]
        raise SourceError(f"{where}: episode {dup} is listed twice")
    expected = np.r_[0, stop[:-1]]
    wrong = np.flatnonzero((start != expected) | (stop - start != length) | (length <= 0))
    if wrong.size:
        i = int(wrong[0])
        if start[i] != expected[i]:
            kind = "overlaps the previous one" if start[i] < expected[i] else "leaves a gap"
            raise SourceError(
                f"{where}: episode {ep[i]} starts at frame {start[i]} but the previous "
                f"episode ends at {expected[i]}: its range {kind}"
            )
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
