"""Write small synthetic LeRobot **v2.1** datasets for tests: the same frames as
``tests.support.lerobot_factory.write_lerobot_v3`` writes, in the layout lerobot 0.3 (codebase v2.1)
wrote:

* ``data/chunk-XXX/episode_XXXXXX.parquet``: one file per episode (same columns and schema
  as the v3.0 data files; lerobot 2.1 wrote them with ``datasets``' ``to_parquet``).
* ``videos/chunk-XXX/<video_key>/episode_XXXXXX.mp4``: each episode encoded on its own,
  starting at timestamp 0 (lerobot 2.1 never concatenated episodes).
* ``meta/info.json`` (``codebase_version`` "v2.1", ``data_path``/``video_path`` templates with
  ``episode_chunk``/``episode_index``, ``total_chunks``, ``total_videos``),
  ``meta/episodes.jsonl`` (``episode_index``, ``tasks``, ``length``), ``meta/tasks.jsonl``
  (``task_index``, ``task``), ``meta/episodes_stats.jsonl`` (per-episode min/max/mean/std/count,
  no quantiles; no ``meta/stats.json``).

How: ``write_lerobot_v3`` with one episode per data and video file encodes every episode
exactly as lerobot 2.1 did (one encode per episode, moved into place without any remux);
those files are then moved into the v2.1 paths and the metadata rewritten. The encoded
packets are therefore the ones a v3.0 dataset of the same data holds (where lerobot
appends them to shared files by stream copy), so converting either must give the same
jaxload dataset.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.support.lerobot_factory import write_lerobot_v3

__all__ = ["relayout_v3_to_v21", "write_lerobot_v21"]

CODEBASE_VERSION = "v2.1"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
EPISODE_STATS = ("min", "max", "mean", "std", "count")


def write_lerobot_v21(root: Path, **kwargs: Any) -> Path:
    """Write a LeRobot v2.1 dataset to ``root`` (created; must be absent or empty).

    Takes ``write_lerobot_v3``'s arguments except the ``episodes_per_*_file`` ones (v2.1
    has one file per episode).
    """
    fixed = {k for k in kwargs if k.startswith("episodes_per_")}
    if fixed:
        raise ValueError(f"v2.1 stores one file per episode; drop {sorted(fixed)}")
    with tempfile.TemporaryDirectory(prefix="lerobot_factory_v21_") as tmp:
        v3 = write_lerobot_v3(
            Path(tmp) / "v3", episodes_per_data_file=1, episodes_per_video_file=1, **kwargs
        )
        return relayout_v3_to_v21(v3, root)


def relayout_v3_to_v21(v3: Path, root: Path) -> Path:
    """Move a v3.0 dataset with one episode per data and video file into the v2.1 layout."""
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} exists and is not empty")
    info = json.loads((v3 / "meta/info.json").read_text())
    cameras = sorted(k for k, f in info["features"].items() if f["dtype"] == "video")
    rows = _episode_rows(v3)
    for row in rows:
        ep = row["episode_index"]
        chunk = ep // CHUNKS_SIZE
        data = info["data_path"].format(
            chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )
        _move(v3 / data, root / DATA_PATH.format(episode_chunk=chunk, episode_index=ep))
        for cam in cameras:
            if row[f"videos/{cam}/from_timestamp"] != 0:
                raise ValueError(f"episode {ep} of {cam} does not start its own video file")
            video = info["video_path"].format(
                video_key=cam,
                chunk_index=row[f"videos/{cam}/chunk_index"],
                file_index=row[f"videos/{cam}/file_index"],
            )
            target = VIDEO_PATH.format(episode_chunk=chunk, video_key=cam, episode_index=ep)
            _move(v3 / video, root / target)
    meta = root / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    _write_jsonl(
        meta / "episodes.jsonl",
        [
            {"episode_index": r["episode_index"], "tasks": r["tasks"], "length": r["length"]}
            for r in rows
        ],
    )
    _write_jsonl(meta / "tasks.jsonl", _tasks(v3))
    _write_jsonl(meta / "episodes_stats.jsonl", [_episode_stats(r) for r in rows])
    _write_json(meta / "info.json", _info_v21(info, len(rows), len(cameras)))
    return root


def _episode_rows(v3: Path) -> list[dict[str, Any]]:
    files = sorted((v3 / "meta/episodes").glob("chunk-*/file-*.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    return sorted(rows, key=lambda r: r["episode_index"])


def _tasks(v3: Path) -> list[dict[str, Any]]:
    table = pq.read_table(v3 / "meta/tasks.parquet").to_pylist()
    return sorted(
        ({"task_index": r["task_index"], "task": r["__index_level_0__"]} for r in table),
        key=lambda r: r["task_index"],
    )


def _episode_stats(row: dict[str, Any]) -> dict[str, Any]:
    """lerobot 2.1's per-episode stats: min/max/mean/std/count (no quantiles)."""
    stats: dict[str, dict[str, Any]] = {}
    for column, value in row.items():
        parts = column.split("/")
        if parts[0] == "stats" and parts[-1] in EPISODE_STATS:
            key = "/".join(parts[1:-1])
            stats.setdefault(key, {})[parts[-1]] = value
    return {"episode_index": row["episode_index"], "stats": stats}


def _info_v21(info: dict[str, Any], episodes: int, cameras: int) -> dict[str, Any]:
    out = {k: v for k, v in info.items() if not k.endswith("_size_in_mb")}
    out["codebase_version"] = CODEBASE_VERSION
    out["total_videos"] = episodes * cameras
    out["total_chunks"] = (episodes - 1) // CHUNKS_SIZE + 1
    out["chunks_size"] = CHUNKS_SIZE
    out["data_path"] = DATA_PATH
    out["video_path"] = VIDEO_PATH if cameras else None
    order = [
        "codebase_version",
        "robot_type",
        "total_episodes",
        "total_frames",
        "total_tasks",
        "total_videos",
        "total_chunks",
        "chunks_size",
        "fps",
        "splits",
        "data_path",
        "video_path",
        "features",
    ]
    return {k: out[k] for k in order if k in out}


def _move(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(src, dst)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """lerobot's ``write_json``: 4-space indent, no trailing newline."""
    path.write_text(json.dumps(data, indent=4, ensure_ascii=False))
