"""Reads a LeRobot codebase v2.1 (and v2.0) dataset.

Layout (as lerobot 0.1-0.3 wrote it):

    meta/info.json              codebase_version "v2.1", fps, features, chunks_size,
                                data_path  "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
                                video_path "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
    meta/episodes.jsonl         {"episode_index": 0, "tasks": ["..."], "length": 123} per line
    meta/tasks.jsonl            {"task_index": 0, "task": "..."} per line
    meta/episodes_stats.jsonl   {"episode_index": 0, "stats": {key: {min, max, mean, std, count}}}
                                (v2.0 has meta/stats.json instead)

Every episode has its own parquet file and, per camera, its own mp4 starting at time 0.
Episode boundaries in the global `index` are the cumulative lengths in episode order, as
LeRobot computes them (`get_episode_data_index`). The dataset's stats are the
aggregate of the per-episode stats, as LeRobotDataset v2.1 computes them on load.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pyarrow as pa

from jaxload.converters.files import Files, LocalFiles
from jaxload.converters.lerobot_common import Episode, LeRobotSource, VideoSpan
from jaxload.errors import SourceError

SUPPORTED_VERSIONS = ("v2.0", "v2.1")
EPISODES_PATH = "meta/episodes.jsonl"
TASKS_PATH = "meta/tasks.jsonl"
EPISODES_STATS_PATH = "meta/episodes_stats.jsonl"
STATS_PATH = "meta/stats.json"
DEFAULT_CHUNKS_SIZE = 1000


class LeRobotV21Source(LeRobotSource):
    """A LeRobot v2.1 dataset (a directory, or any `Files`).

    Example::

        src = LeRobotV21Source("data/aloha_v21")
        src.episode(3).start   # global index of its first frame: cumulative lengths
    """

    SUPPORTED_VERSIONS = SUPPORTED_VERSIONS

    def __init__(self, files: Files | str | os.PathLike):
        super().__init__(files if isinstance(files, Files) else LocalFiles(files))
        self.chunks_size = int(self.info.get("chunks_size") or DEFAULT_CHUNKS_SIZE)
        self._episodes = read_episodes(self.files, self.info)
        self._tasks = read_tasks(self.files)

    @property
    def episode_ids(self) -> list[int]:
        return list(self._episodes)

    @property
    def tasks(self) -> dict[int, str]:
        return self._tasks

    def episode(self, episode: int) -> Episode:
        if episode not in self._episodes:
            raise SourceError(f"{self.root}: no episode {episode}")
        return self._episodes[episode]

    def data_file(self, episode: int) -> str:
        return self.path_of(
            "data_path", episode_chunk=episode // self.chunks_size, episode_index=episode
        )

    def video_span(self, episode: int, camera: str) -> VideoSpan:
        rel = self.path_of(
            "video_path",
            episode_chunk=episode // self.chunks_size,
            video_key=camera,
            episode_index=episode,
        )
        return VideoSpan(rel, 0.0, self.episode(episode).length / self.fps)

    def episode_frames(self, episode: int) -> pa.Table:
        ep = self.episode(episode)
        rel = self.data_file(episode)
        frames = self.read_data_file(rel, f"data file of episode {episode}")
        self.check_episode_rows(frames, ep, rel)
        return frames

    def stats_json(self) -> bytes | None:
        if self.files.exists(STATS_PATH):  # v2.0
            return self.files.read_bytes(STATS_PATH)
        if not self.files.exists(EPISODES_STATS_PATH):
            return None
        stats = aggregate_stats(read_episodes_stats(self.files))
        return json.dumps(stats, indent=4).encode()

    def meta_files(self) -> list[str]:
        optional = [p for p in (EPISODES_STATS_PATH, STATS_PATH) if self.files.exists(p)]
        return ["meta/info.json", EPISODES_PATH, TASKS_PATH, *optional]

    def data_file_rows(self) -> dict[str, int]:
        return {self.data_file(ep): self.episode(ep).length for ep in self.episode_ids}


def read_jsonl(files: Files, rel: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-empty line."""
    where = files.describe(rel)
    if not files.exists(rel):
        raise SourceError(f"{where}: missing")
    rows = []
    text = files.read_bytes(rel).decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise SourceError(f"{where}: line {number} is not valid JSON ({e})") from e
        if not isinstance(obj, dict):
            raise SourceError(f"{where}: line {number} is not a JSON object")
        rows.append((number, obj))
    return rows


def read_episodes(files: Files, info: dict[str, Any]) -> dict[int, Episode]:
    """meta/episodes.jsonl in episode order, with boundaries from cumulative lengths."""
    where = files.describe(EPISODES_PATH)
    raw: dict[int, tuple[int, list[str]]] = {}
    for number, obj in read_jsonl(files, EPISODES_PATH):
        try:
            ep, length, tasks = int(obj["episode_index"]), int(obj["length"]), obj["tasks"]
        except (KeyError, TypeError, ValueError) as e:
            raise SourceError(
                f"{where}: line {number} lacks an integer episode_index/length or tasks ({e!r})"
            ) from e
        if ep in raw:
            raise SourceError(f"{where}: episode {ep} is listed twice (line {number})")
        if length <= 0:
            raise SourceError(f"{where}: episode {ep} has length {length}")
        if isinstance(tasks, str):
            tasks = [tasks]
        raw[ep] = (length, [str(t) for t in tasks])
    if not raw:
        raise SourceError(f"{where}: no episodes")
    episodes, start = {}, 0
    for ep in sorted(raw):
        length, tasks = raw[ep]
        episodes[ep] = Episode(ep, length, start, tuple(tasks))
        start += length
    if start != int(info["total_frames"]):
        raise SourceError(
            f"{where}: episode lengths sum to {start} frames but meta/info.json says "
            f"total_frames={info['total_frames']}"
        )
    if len(episodes) != int(info["total_episodes"]):
        raise SourceError(
            f"{where}: {len(episodes)} episodes but meta/info.json says "
            f"total_episodes={info['total_episodes']}"
        )
    return episodes


def read_tasks(files: Files) -> dict[int, str]:
    where = files.describe(TASKS_PATH)
    tasks = {}
    for number, obj in read_jsonl(files, TASKS_PATH):
        try:
            tasks[int(obj["task_index"])] = str(obj["task"])
        except (KeyError, TypeError, ValueError) as e:
            raise SourceError(f"{where}: line {number} lacks task_index/task ({e!r})") from e
    return tasks


def read_episodes_stats(files: Files) -> list[dict[str, dict[str, np.ndarray]]]:
    """Per-episode stats in episode order, as arrays."""
    where = files.describe(EPISODES_STATS_PATH)
    stats = []
    for number, obj in sorted(
        read_jsonl(files, EPISODES_STATS_PATH), key=lambda r: r[1].get("episode_index", -1)
    ):
        try:
            stats.append(
                {
                    key: {name: np.asarray(v) for name, v in values.items()}
                    for key, values in obj["stats"].items()
                }
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise SourceError(f"{where}: line {number} holds no stats object ({e!r})") from e
    return stats


def aggregate_stats(parts: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, Any]:
    """LeRobot's `aggregate_stats`: count-weighted means and variances, global min/max
    (and count-weighted quantiles where the episodes carry them), as JSON lists."""
    keys = list(dict.fromkeys(k for part in parts for k in part))
    out: dict[str, Any] = {}
    for key in keys:
        stats = [part[key] for part in parts if key in part]
        means = np.stack([s["mean"] for s in stats])
        variances = np.stack([s["std"] ** 2 for s in stats])
        counts = np.stack([s["count"] for s in stats])
        total = counts.sum(axis=0)
        while counts.ndim < means.ndim:
            counts = np.expand_dims(counts, axis=-1)
        mean = (means * counts).sum(axis=0) / total
        variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
        feature = {
            "min": np.min(np.stack([s["min"] for s in stats]), axis=0),
            "max": np.max(np.stack([s["max"] for s in stats]), axis=0),
            "mean": mean,
            "std": np.sqrt(variance),
            "count": total,
        }
        quantiles = [q for q in stats[0] if q[:1] == "q" and q[1:].isdigit()]
        for q in quantiles:
            if all(q in s for s in stats):
                feature[q] = (np.stack([s[q] for s in stats]) * counts).sum(axis=0) / total
        out[key] = {name: value.tolist() for name, value in feature.items()}
    return out
