"""`jaxload convert`: a LeRobot dataset in, a jaxload dataset out, atomically.

Episodes are converted in parallel (a process pool) and written in episode order by this
process, so the output bytes do not depend on the worker count. Everything is written
into a hidden temp directory beside OUT and renamed to OUT only when complete: OUT never
exists half-written, and a failure leaves nothing behind.
"""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from converters import video
from converters.lerobot_v3 import LeRobotV3Source
from converters.tabular import features_from_schema, frame_blocks
from converters.writer import DEFAULT_SHARD_BYTES, ShardWriter
from jaxload import format as fmt
from jaxload.errors import JaxloadError, SourceError
from jaxload.format import Camera, DatasetInfo, Feature

DEFAULT_GOP = 8
DEFAULT_CRF = 14  # lowest PSNR >= 38 dB vs the AV1 source on the fixtures (docs/FORMAT.md)


@dataclasses.dataclass
class EpisodeResult:
    """One converted episode, as a worker hands it back."""

    episode_index: int
    length: int
    dataset_from_index: int
    tasks: list[str]
    frames: list[bytes]  # tabular rows, FRAMES_PER_BLOCK per record
    streams: dict[str, video.EncodedStream]


@dataclasses.dataclass
class ConvertReport:
    """What a conversion did, printed at the end of `jaxload convert`."""

    out: Path
    episodes: int
    frames: int
    seconds: float
    source_bytes: int
    output_bytes: int
    psnr: dict[str, tuple[float, float]]  # camera -> (min, mean) dB

    def summary(self) -> str:
        lines = [
            f"wrote {self.out}: {self.episodes} episodes, {self.frames} frames "
            f"in {self.seconds:.1f} s ({self.frames / max(self.seconds, 1e-9):.0f} frames/s)",
            f"size: {_mb(self.source_bytes)} source -> {_mb(self.output_bytes)} "
            f"(ratio {self.output_bytes / max(self.source_bytes, 1):.2f})",
        ]
        for cam, (lo, mean) in self.psnr.items():
            lines.append(f"fidelity {cam}: PSNR min {lo:.2f} dB, mean {mean:.2f} dB")
        return "\n".join(lines)


def convert(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    video_codec: str = "h264",
    gop: int = DEFAULT_GOP,
    crf: int = DEFAULT_CRF,
    workers: int | None = None,
    episodes: Sequence[int] | str | None = None,
    repo_id: str | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    progress: bool = True,
) -> ConvertReport:
    """Converts the LeRobot v3.0 dataset at `src` into a jaxload dataset at `out`.

    Example:
        >>> report = convert("lerobot/pusht_local", "out/pusht", video_codec="h264", gop=8)
        >>> print(report.summary())
    """
    started = time.perf_counter()
    out = Path(out)
    _check_out(out)
    options = _encode_options(video_codec, gop, crf)
    source = LeRobotV3Source(src)
    selected = _select_episodes(source, episodes)
    features = _features(source, selected[0])
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        tmp.mkdir(parents=True)
        jobs = [(str(source.root), ep, options, features) for ep in selected]
        n_workers = _worker_count(workers, len(jobs))
        total = int(sum(source.row(ep)["length"] for ep in selected))
        results = _parallel_map(_convert_episode, jobs, n_workers)
        bar = tqdm(
            total=total,
            unit="frame",
            disable=not progress,
            desc="convert",
            file=sys.stderr,
            dynamic_ncols=True,
        )
        with bar:
            written = _write_episodes(tmp, results, features, shard_bytes, bar)
        rows, psnr = written.rows, written.psnr
        info = _dataset_info(source, written, features, options, repo_id, shard_bytes)
        _write_meta(tmp, source, rows, info)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ConvertReport(
        out=out,
        episodes=len(rows),
        frames=total,
        seconds=time.perf_counter() - started,
        source_bytes=_source_bytes(source, selected),
        output_bytes=_tree_bytes(out),
        psnr={cam: (float(v.min()), float(v.mean())) for cam, v in psnr.items()},
    )


# --- planning ---------------------------------------------------------------------------


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise JaxloadError(f"{out}: already exists and is not empty; refusing to overwrite it")


def _encode_options(codec: str, gop: int, crf: int) -> video.EncodeOptions:
    if codec not in (*video.CODECS, "copy"):
        raise JaxloadError(f"--video-codec {codec!r}: choose h264, hevc or copy")
    if gop < 1:
        raise JaxloadError(f"--gop {gop}: must be at least 1")
    if not 0 <= crf <= 51:
        raise JaxloadError(f"--crf {crf}: must be within 0..51")
    return video.EncodeOptions(codec=codec, gop=gop, crf=crf)


def parse_episodes(spec: str) -> list[int]:
    """Parses an episode selection such as "0-9,12,20-25" (inclusive ranges)."""
    selected: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise JaxloadError(f"--episodes {spec!r}: {part!r} is not N or N-M") from None
        if first < 0 or last < first:
            raise JaxloadError(f"--episodes {spec!r}: bad range {part!r}")
        selected.update(range(first, last + 1))
    if not selected:
        raise JaxloadError(f"--episodes {spec!r}: selects nothing")
    return sorted(selected)


def _select_episodes(source: LeRobotV3Source, episodes: Sequence[int] | str | None) -> list[int]:
    available = source.episode_ids
    if episodes is None:
        return available
    wanted = parse_episodes(episodes) if isinstance(episodes, str) else sorted(set(episodes))
    missing = sorted(set(wanted) - set(available))
    if missing:
        raise SourceError(f"{source.root}: episodes {missing} do not exist in this dataset")
    return wanted


def _features(source: LeRobotV3Source, first_episode: int) -> dict[str, Feature]:
    path = source.data_path(source.row(first_episode))
    if not path.is_file():
        raise SourceError(f"{path}: missing (data file of episode {first_episode})")
    schema = pq.read_schema(path)
    columns = source.tabular_columns(schema.names)
    return features_from_schema(schema, columns, source.features, str(path))


def _worker_count(workers: int | None, jobs: int) -> int:
    if workers is not None and workers < 1:
        raise JaxloadError(f"--workers {workers}: must be at least 1")
    return max(1, min(workers or os.cpu_count() or 1, jobs))


# --- per-episode work (runs in worker processes) -----------------------------------------

_SOURCES: dict[str, LeRobotV3Source] = {}


def _convert_episode(job: tuple[str, int, video.EncodeOptions, dict[str, Feature]]):
    root, episode, options, features = job
    source = _SOURCES.get(root) or _SOURCES.setdefault(root, LeRobotV3Source(root))
    row = source.row(episode)
    table = source.episode_frames(episode)
    data_path = str(source.data_path(row))
    timestamps = table["timestamp"].to_numpy().astype(np.float64)
    streams = {}
    for cam in source.camera_keys:
        span = source.video_span(row, cam)
        if not span.path.is_file():
            raise SourceError(f"{span.path}: missing (video of episode {episode}, camera {cam})")
        if span.path.stat().st_size == 0:
            raise SourceError(f"{span.path}: empty file (video of episode {episode})")
        if options.codec == "copy":
            streams[cam] = video.copy_stream(
                span.path,
                span.from_timestamp,
                span.to_timestamp,
                len(timestamps),
                source.fps,
                episode=episode,
            )
        else:
            frames = video.decode_source_frames(
                span.path, span.from_timestamp, timestamps, episode=episode
            )
            streams[cam] = video.transcode(
                frames, options, source.fps, where=f"{span.path}: episode {episode}"
            )
    return EpisodeResult(
        episode_index=episode,
        length=int(row["length"]),
        dataset_from_index=int(row["dataset_from_index"]),
        tasks=list(row["tasks"]),
        frames=frame_blocks(table, features, f"{data_path}: episode {episode}"),
        streams=streams,
    )


def _parallel_map(fn: Callable, jobs: list, workers: int) -> Iterator[Any]:
    """Yields fn(job) in job order, keeping at most 2 x workers jobs in flight."""
    if workers == 1:
        yield from map(fn, jobs)
        return
    context = multiprocessing.get_context("spawn")  # torch and FFmpeg do not survive fork
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        pending: collections.deque[Future] = collections.deque()
        queue = iter(jobs)
        try:
            for job in queue:
                pending.append(pool.submit(fn, job))
                if len(pending) >= 2 * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


# --- writing ------------------------------------------------------------------------------


@dataclasses.dataclass
class _Written:
    rows: list[dict[str, Any]]  # meta/episodes.parquet rows
    psnr: dict[str, np.ndarray]  # camera -> per-frame PSNR over all episodes
    digest: str  # sha256 over every record written, in order
    num_shards: int


def _write_episodes(
    root: Path, results: Iterable[EpisodeResult], features, shard_bytes: int, bar: tqdm
) -> _Written:
    writer = ShardWriter(root, shard_bytes)
    rows, psnr = [], collections.defaultdict(list)
    try:
        for result in results:
            cams = sorted(result.streams)
            shard, starts = writer.append_episode(
                [result.frames, *(result.streams[c].segments for c in cams)]
            )
            row = {
                "episode_index": result.episode_index,
                "length": result.length,
                "dataset_from_index": result.dataset_from_index,
                "tasks": result.tasks,
                "shard": shard,
                "frames_record_start": starts[0],
            }
            for cam, start in zip(cams, starts[1:]):
                stream = result.streams[cam]
                row[fmt.segment_column(cam, "record_start")] = start
                row[fmt.segment_column(cam, "segment_starts")] = stream.segment_starts
                row[fmt.segment_column(cam, "psnr_min")] = float(stream.psnr.min())
                psnr[cam].append(stream.psnr)
            rows.append(row)
            bar.update(result.length)
    finally:
        writer.close()
    psnr = {cam: np.concatenate(v) for cam, v in psnr.items()}
    return _Written(rows, psnr, writer.digest.hexdigest(), writer.num_shards)


def _dataset_info(source, written: _Written, features, options, repo_id, shard_bytes):
    rows, psnr = written.rows, written.psnr
    cameras = {
        cam: Camera(
            codec=options.codec if options.codec != "copy" else _source_codec(source, cam),
            height=int(source.features[cam]["shape"][0]),
            width=int(source.features[cam]["shape"][1]),
            pix_fmt="yuv420p",
            gop=None if options.codec == "copy" else options.gop,
            crf=None if options.codec == "copy" else options.crf,
            source_codec=_source_codec(source, cam),
        )
        for cam in source.camera_keys
    }
    fingerprint = fmt.content_fingerprint(
        source.fps,
        features,
        cameras,
        [(r["episode_index"], r["length"], r["tasks"]) for r in rows],
        written.digest,
    )
    return DatasetInfo(
        fps=source.fps,
        total_frames=int(sum(r["length"] for r in rows)),
        total_episodes=len(rows),
        features=features,
        cameras=cameras,
        num_shards=written.num_shards,
        fingerprint=fingerprint,
        source={
            "format": "lerobot",
            "codebase_version": source.info["codebase_version"],
            "repo_id": repo_id,
            "robot_type": source.info.get("robot_type"),
        },
        converter={
            "frames_per_block": fmt.FRAMES_PER_BLOCK,
            "video_codec": options.codec,
            "gop": options.gop,
            "crf": options.crf,
            "shard_bytes": shard_bytes,
            "fidelity_psnr_db": {
                cam: {"min": _finite(v.min()), "mean": _finite(v.mean())} for cam, v in psnr.items()
            },
        },
    )


def _source_codec(source: LeRobotV3Source, cam: str) -> str:
    return str(source.features[cam].get("info", {}).get("video.codec", "unknown"))


def _finite(x: float) -> float | None:
    """JSON has no inf: a lossless stream (PSNR inf) is stored as null."""
    return float(x) if np.isfinite(x) else None


def _write_meta(root: Path, source: LeRobotV3Source, rows, info: DatasetInfo) -> None:
    meta = root / "meta"
    meta.mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), meta / "episodes.parquet")
    tasks = sorted(source.tasks.items())
    pq.write_table(
        pa.table({"task_index": [i for i, _ in tasks], "task": [t for _, t in tasks]}),
        meta / "tasks.parquet",
    )
    stats = source.root / "meta" / "stats.json"
    if stats.is_file():
        shutil.copyfile(stats, meta / "stats.json")
    fmt.write_json_atomic(root / fmt.INFO_PATH, info.to_json())


def _publish(tmp: Path, out: Path) -> None:
    """Makes the finished dataset visible under its name in one rename."""
    if out.is_dir():
        out.rmdir()  # empty (checked at the start); rename cannot replace a directory
    os.rename(tmp, out)


def _source_bytes(source: LeRobotV3Source, episodes: list[int]) -> int:
    files = set()
    for ep in episodes:
        row = source.row(ep)
        files.add(source.data_path(row))
        files.update(source.video_span(row, cam).path for cam in source.camera_keys)
    return sum(f.stat().st_size for f in files)


def _tree_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f} MB"
