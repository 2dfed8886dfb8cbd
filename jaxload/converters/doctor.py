"""`jaxload doctor` on a LeRobot source (v3.0 or v2.1): what would break a conversion or
training.

Public datasets ship videos that are dozens of frames short, data files with orphan
rows, and fps that disagree between metadata and streams; each check names the file and
the episode at fault. The source may be a directory, a hub id or an fsspec URL (remote
files are fetched into a temporary cache, deleted afterwards).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import av
import numpy as np

from jaxload.converters import lerobot_v3, lerobot_v21
from jaxload.converters.files import Files
from jaxload.converters.images import image_frames
from jaxload.converters.lerobot_common import LeRobotSource, load_info, read_info
from jaxload.converters.sources import open_files, reader_for
from jaxload.converters.tabular import features_from_schema
from jaxload.errors import SourceError
from jaxload.tools.doctor import CheckResult, run_checks

TIMESTAMP_TOLERANCE_S = 1e-4


def check_source(
    path: str | os.PathLike,
    *,
    revision: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> list[CheckResult]:
    """Runs the source checks; one CheckResult per check. `storage_options` configure the
    fsspec filesystem of a URL `path`."""
    with tempfile.TemporaryDirectory(prefix="jaxload-doctor-") as cache:
        files = open_files(
            path, revision=revision, cache_dir=cache, storage_options=storage_options
        )
        return _checks(files)


def _checks(files: Files) -> list[CheckResult]:
    state: dict = {}

    def metadata():
        state["reader"] = reader = reader_for(files, load_info(files))
        state["info"] = info = read_info(files, reader.SUPPORTED_VERSIONS)
        return f"codebase {info['codebase_version']}, fps {info['fps']}"

    def episodes():
        info = state["info"]
        if state["reader"] is lerobot_v21.LeRobotV21Source:
            count = len(lerobot_v21.read_episodes(files, info))
        else:
            count = len(lerobot_v3.read_episodes(files, info))
        return f"{count} episodes tile [0, {info['total_frames']})"

    def tasks():
        if state["reader"] is lerobot_v21.LeRobotV21Source:
            return f"{len(lerobot_v21.read_tasks(files))} tasks"
        return f"{len(lerobot_v3.read_tasks(files))} tasks"

    def data_files():
        state["source"] = source = state["reader"](files)
        return _check_data_files(source)

    def timestamps():
        return _check_timestamps(state["source"])

    def videos():
        return _check_videos(state["source"])

    def images_and_features():
        return _check_images_and_features(state["source"])

    return run_checks(
        [
            ("metadata loads and codebase version is supported", metadata),
            ("episode ranges tile the frames", episodes),
            ("tasks load", tasks),
            ("data files exist, row counts match, index sorted, no orphans", data_files),
            ("timestamps match fps", timestamps),
            ("videos exist, decode, match fps and hold every frame", videos),
            (
                "image frames decode at their declared size; every feature has a column",
                images_and_features,
            ),
        ]
    )


def _check_data_files(source: LeRobotSource) -> str:
    for ep in source.episode_ids:
        source.episode_frames(ep)  # raises naming file and episode
    expected = source.data_file_rows()
    for rel, rows in expected.items():
        table = source.read_data_file(rel)
        where = source.files.describe(rel)
        if table.num_rows != rows:
            raise SourceError(
                f"{where}: holds {table.num_rows} rows but its episodes account for {rows} "
                f"({table.num_rows - rows} orphan rows)"
            )
        if np.any(np.diff(table["index"].to_numpy()) <= 0):
            raise SourceError(f"{where}: column 'index' is not sorted")
    unreferenced = sorted(set(source.files.glob("data/*/*.parquet")) - set(expected))
    if unreferenced:
        raise SourceError(
            f"{source.files.describe(unreferenced[0])}: data file not referenced by any episode"
        )
    return f"{len(expected)} data files"


def _check_timestamps(source: LeRobotSource) -> str:
    for ep in source.episode_ids:
        table = source.episode_frames(ep)
        ts = table["timestamp"].to_numpy().astype(np.float64)
        expected = table["frame_index"].to_numpy() / source.fps
        bad = np.flatnonzero(np.abs(ts - expected) > TIMESTAMP_TOLERANCE_S)
        if bad.size:
            raise SourceError(
                f"{source.files.describe(source.data_file(ep))}: episode {ep}: timestamp "
                f"{ts[bad[0]]} at frame {bad[0]} is not frame_index / fps ({expected[bad[0]]}) "
                f"at fps {source.fps}"
            )
    return f"fps {source.fps}"


def _check_images_and_features(source: LeRobotSource) -> str:
    """What converting the data rows needs: each declared feature (numeric, string) has a
    column of a kind jaxload carries, and every image frame decodes at its declared size."""
    frames = 0
    for ep in source.episode_ids:
        rel = source.data_file(ep)
        where = f"{source.files.describe(rel)}: episode {ep}"
        schema = source.data_schema(ep)
        features_from_schema(schema, source.tabular_columns(schema.names), source.features, where)
        table = source.episode_frames(ep)
        for cam in source.image_keys:
            size = source.camera_size(cam)
            frames += sum(1 for _ in image_frames(table, cam, size, where=where))
    strings = [k for k, f in source.features.items() if f["dtype"] == "string"]
    return f"{frames} image frames, {len(strings)} string feature(s)"


def _check_videos(source: LeRobotSource) -> str:
    """Each file must hold the frames up to the last episode's to_timestamp."""
    needed: dict[str, tuple[int, int, str]] = {}  # file -> (frames needed, episode, camera)
    for ep in source.episode_ids:
        length = source.episode(ep).length
        for cam in source.video_keys:
            span = source.video_span(ep, cam)
            frames = round(span.from_timestamp * source.fps) + length
            if frames > needed.get(span.rel, (0,))[0]:
                needed[span.rel] = (frames, ep, cam)
    for rel, (frames, ep, cam) in sorted(needed.items()):
        where = source.files.describe(rel)
        path = source.files.local(rel, f"video of episode {ep}, camera {cam}")
        count, fps = _count_frames(path, where, ep)
        if abs(fps - source.fps) > 1e-3:
            raise SourceError(
                f"{where}: stream runs at {fps:g} fps but meta/info.json says {source.fps}"
            )
        if count < frames:
            raise SourceError(
                f"{where}: holds {count} frames, but episode {ep} ({cam}) needs {frames}: "
                f"the video is {frames - count} frames short"
            )
        source.files.evict(rel)  # a remote check keeps one video at a time on disk
    return f"{len(needed)} video files"


def _count_frames(path: Path, where: str, episode: int) -> tuple[int, float]:
    """Frames in a video by counting packets (headers may lie), and its average fps."""
    if path.stat().st_size == 0:
        raise SourceError(f"{where}: empty file (video of episode {episode})")
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            count = sum(1 for p in container.demux(stream) if p.size)
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            # Decode the first frame too: a readable header with broken data is not enough.
            container.seek(0)
            next(container.decode(stream))
    except (av.FFmpegError, IndexError, StopIteration, OSError) as e:
        raise SourceError(f"{where}: unreadable video (episode {episode}): {e}") from e
    return count, fps
