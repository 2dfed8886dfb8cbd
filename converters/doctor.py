"""`jaxload doctor` on a LeRobot v3.0 source: what would break a conversion or training.

Public datasets ship videos that are dozens of frames short, data files with orphan
rows, and fps that disagree between metadata and streams; each check names the file and
the episode at fault.
"""

from __future__ import annotations

import collections
from pathlib import Path

import av
import numpy as np

from converters import lerobot_v3
from jaxload.doctor import CheckResult, run_checks
from jaxload.errors import SourceError

TIMESTAMP_TOLERANCE_S = 1e-4


def check_source(path: str | Path) -> list[CheckResult]:
    root = Path(path)
    state: dict = {}

    def metadata():
        state["info"] = info = lerobot_v3.read_info(root)
        return f"codebase {info['codebase_version']}, fps {info['fps']}"

    def episodes():
        state["episodes"] = lerobot_v3.read_episodes(root, state["info"])
        return f"{state['episodes'].num_rows} episodes tile [0, {state['info']['total_frames']})"

    def tasks():
        return f"{len(lerobot_v3.read_tasks(root))} tasks"

    def data_files():
        state["source"] = source = lerobot_v3.LeRobotV3Source(root)
        return _check_data_files(source)

    def timestamps():
        return _check_timestamps(state["source"])

    def videos():
        return _check_videos(state["source"])

    return run_checks(
        [
            ("metadata loads and codebase version is supported", metadata),
            ("episode ranges tile the frames", episodes),
            ("tasks load", tasks),
            ("data files exist, row counts match, index sorted, no orphans", data_files),
            ("timestamps match fps", timestamps),
            ("videos exist, decode, match fps and hold every frame", videos),
        ]
    )


def _check_data_files(source: lerobot_v3.LeRobotV3Source) -> str:
    expected = collections.Counter()
    for ep in source.episode_ids:
        source.episode_frames(ep)  # raises naming file and episode
        expected[source.data_path(source.row(ep))] += source.row(ep)["length"]
    for path, rows in expected.items():
        table = lerobot_v3.read_data_file(path)
        if table.num_rows != rows:
            raise SourceError(
                f"{path}: holds {table.num_rows} rows but its episodes account for {rows} "
                f"({table.num_rows - rows} orphan rows)"
            )
        if np.any(np.diff(table["index"].to_numpy()) <= 0):
            raise SourceError(f"{path}: column 'index' is not sorted")
    unreferenced = sorted(set((source.root / "data").glob("chunk-*/*.parquet")) - set(expected))
    if unreferenced:
        raise SourceError(f"{unreferenced[0]}: data file not referenced by any episode")
    return f"{len(expected)} data files"


def _check_timestamps(source: lerobot_v3.LeRobotV3Source) -> str:
    for ep in source.episode_ids:
        table = source.episode_frames(ep)
        ts = table["timestamp"].to_numpy().astype(np.float64)
        expected = table["frame_index"].to_numpy() / source.fps
        bad = np.flatnonzero(np.abs(ts - expected) > TIMESTAMP_TOLERANCE_S)
        if bad.size:
            raise SourceError(
                f"{source.data_path(source.row(ep))}: episode {ep}: timestamp {ts[bad[0]]} at "
                f"frame {bad[0]} is not frame_index / fps ({expected[bad[0]]}) at fps "
                f"{source.fps}"
            )
    return f"fps {source.fps}"


def _check_videos(source: lerobot_v3.LeRobotV3Source) -> str:
    """Each file must hold the frames up to the last episode's to_timestamp."""
    needed: dict[Path, tuple[int, int, str]] = {}  # file -> (frames needed, episode, camera)
    for ep in source.episode_ids:
        row = source.row(ep)
        for cam in source.camera_keys:
            span = source.video_span(row, cam)
            frames = round(span.from_timestamp * source.fps) + row["length"]
            if frames > needed.get(span.path, (0,))[0]:
                needed[span.path] = (frames, ep, cam)
    for path, (frames, ep, cam) in sorted(needed.items()):
        count, fps = _count_frames(path, ep)
        if abs(fps - source.fps) > 1e-3:
            raise SourceError(
                f"{path}: stream runs at {fps:g} fps but meta/info.json says {source.fps}"
            )
        if count < frames:
            raise SourceError(
                f"{path}: holds {count} frames, but episode {ep} ({cam}) needs {frames}: "
                f"the video is {frames - count} frames short"
            )
    return f"{len(needed)} video files"


def _count_frames(path: Path, episode: int) -> tuple[int, float]:
    """Frames in a video by counting packets (headers may lie), and its average fps."""
    if not path.is_file():
        raise SourceError(f"{path}: missing (video of episode {episode})")
    if path.stat().st_size == 0:
        raise SourceError(f"{path}: empty file (video of episode {episode})")
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            count = sum(1 for p in container.demux(stream) if p.size)
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            # Decode the first frame too: a readable header with broken data is not enough.
            container.seek(0)
            next(container.decode(stream))
    except (av.FFmpegError, IndexError, StopIteration, OSError) as e:
        raise SourceError(f"{path}: unreadable video (episode {episode}): {e}") from e
    return count, fps
