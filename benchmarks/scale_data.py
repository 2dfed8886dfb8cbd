"""Large benchmark datasets, generated in seconds to minutes: LeRobot v3.0 sources of up to
100k episodes (tabular, or with small cameras), and a jaxload dataset of DROID's shape.

* `write_lerobot_source`: a LeRobot v3.0 source as lerobot 0.4.4 lays it out (data files
  of `episodes_per_file` episodes, one row group per episode; meta/episodes files in row
  groups of 10 episodes with per-episode `stats/...` columns; videos: several episodes per
  mp4), written column-wise instead of episode by episode as tests/support/lerobot_factory
  does (which would take hours at 100k episodes). Each video file is one continuous
  libx264 encode (lerobot's options: g=2, crf 30, B-frames), episodes following each other.
* `write_droid_shaped`: a converted dataset with DROID's counts (92,233 episodes,
  27,044,326 frames, 3 cameras at GOP 4: 20.4 million GOP records), its metadata built from
  a real conversion's (info.json, a camera's init segment and GOP records, the frame
  dtype). Only shard 0 (the first `EPISODES_PER_SHARD` episodes) is written, record by
  record as the converter lays it out and sealed with the record checksums; the other
  1,844 shards are not (they would be ~20 million records), so reading in source order
  (`shuffle=False`) is what works on it. Everything the loader reads at open, in
  `make_loader` and in its workers (the episode and task tables, info.json) has DROID's
  size.

Example:
    >>> write_lerobot_source(Path("runs/src"), lengths=np.full(1000, 8), episodes_per_file=1000)
    >>> write_droid_shaped(Path("runs/droid"), template=Path("runs/droid-template"))
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.support import lerobot_factory as factory

# DROID 1.0.1 as LeRobot publishes it (lerobot/droid_1.0.1: meta/info.json).
DROID_EPISODES = 92_233
DROID_FRAMES = 27_044_326
DROID_FPS = 15
DROID_CAMERAS = (
    "observation.images.exterior_1_left",
    "observation.images.exterior_2_left",
    "observation.images.wrist_left",
)
DROID_TASKS = 40_000  # distinct instructions (an assumption: one task per episode, drawn)
EPISODES_PER_SHARD = 50  # 1,845 shards (DROID at 180x320 is ~1,900 shards of 256 MiB)
STAT_NAMES = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
META_ROW_GROUP = factory.META_ROW_GROUP


def droid_lengths(episodes: int = DROID_EPISODES, frames: int = DROID_FRAMES, seed: int = 0):
    """Episode lengths (log-normal around DROID's mean) summing to exactly `frames`."""
    rng = np.random.default_rng(seed)
    lengths = rng.lognormal(np.log(frames / episodes), 0.5, episodes)
    lengths = np.maximum(1, np.floor(lengths * frames / lengths.sum())).astype(np.int64)
    lengths[np.argmax(lengths)] += frames - int(lengths.sum())
    return lengths


# --- LeRobot v3.0 sources -------------------------------------------------------------------


def write_lerobot_source(
    root: Path,
    *,
    lengths: np.ndarray,
    episodes_per_file: int,
    cameras: Mapping[str, tuple[int, int]] | None = None,
    fps: int = 15,
    state_dim: int = 8,
    action_dim: int = 7,
    tasks: int = 100,
) -> Path:
    """A LeRobot v3.0 source of `len(lengths)` episodes (module docstring); returns `root`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=False)
    cameras = dict(cameras or {})
    lengths = np.asarray(lengths, np.int64)
    n = len(lengths)
    starts = np.cumsum(lengths) - lengths
    file_of = np.arange(n) // episodes_per_file
    features = factory._features(cameras, state_dim, action_dim, {})
    tabular = {k: f for k, f in features.items() if f["dtype"] != "video"}
    task_names = [
        f"task {t}: put the object {t % 7} in the container {t % 5}" for t in range(tasks)
    ]
    episode_task = np.arange(n) % tasks
    frames = int(lengths.sum())
    frame_episode = np.repeat(np.arange(n), lengths)
    frame_index = np.arange(frames) - np.repeat(starts, lengths)
    columns = {
        "observation.state": _signal(frame_episode, frame_index, state_dim),
        "action": _signal(frame_episode, frame_index, action_dim) + 0.5,
        "timestamp": (frame_index / fps).astype(np.float32),
        "frame_index": frame_index,
        "episode_index": frame_episode,
        "index": np.arange(frames),
        "task_index": episode_task[frame_episode],
    }
    rows: dict[str, Any] = {
        "episode_index": np.arange(n),
        "tasks": [[task_names[t]] for t in episode_task],
        "length": lengths,
        "data/chunk_index": file_of // factory.CHUNKS_SIZE,
        "data/file_index": file_of % factory.CHUNKS_SIZE,
        "dataset_from_index": starts,
        "dataset_to_index": starts + lengths,
    }
    for number in range(int(file_of[-1]) + 1):
        mine = np.flatnonzero(file_of == number)
        _write_data_file(root, number, tabular, columns, starts[mine], lengths[mine])
    stats = {}
    for key, (height, width) in cameras.items():
        spans = _write_videos(root, key, (height, width), fps, lengths, file_of)
        rows |= {f"videos/{key}/{k}": v for k, v in spans.items()}
        features[key]["info"] = factory._video_info(
            factory._path(root, factory.VIDEO_PATH, 0, video_key=key)
        )
        stats[key] = factory.image_stats([_frame(height, width, 0, t) for t in range(3)])
    for key in tabular:
        stats[key] = factory.feature_stats(columns[key][:1000].reshape(min(frames, 1000), -1))
    _write_episodes_meta(root, rows, stats, n)
    factory._write_tasks(root, {t: i for i, t in enumerate(task_names)})
    factory._write_json(
        root / "meta" / "stats.json", {k: factory._jsonable(v) for k, v in stats.items()}
    )
    info = {
        "codebase_version": factory.CODEBASE_VERSION,
        "robot_type": "synthetic_arm",
        "total_episodes": n,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": factory.CHUNKS_SIZE,
        "data_files_size_in_mb": factory.DATA_FILES_SIZE_IN_MB,
        "video_files_size_in_mb": factory.VIDEO_FILES_SIZE_IN_MB,
        "fps": fps,
        "splits": {"train": f"0:{n}"},
        "data_path": factory.DATA_PATH,
        "video_path": factory.VIDEO_PATH if cameras else None,
        "features": features,
    }
    factory._write_json(root / "meta" / "info.json", info)
    return root


def _signal(episode: np.ndarray, frame: np.ndarray, dims: int) -> np.ndarray:
    """Smooth per-episode curves, (frames, dims) float32."""
    phase = (episode % 97)[:, None] * 0.1 + np.arange(dims)[None, :]
    return np.sin(frame[:, None] * 0.05 + phase).astype(np.float32)


def _write_data_file(root, number, tabular, columns, starts, lengths) -> None:
    """One data parquet file: one row group per episode, as lerobot writes it."""
    first, last = int(starts[0]), int(starts[-1] + lengths[-1])
    table = pa.table(
        {k: factory._arrow_column(columns[k][first:last], f) for k, f in tabular.items()}
    )
    meta = {"info": {"features": {k: factory._hf_feature(f) for k, f in tabular.items()}}}
    schema = table.schema.with_metadata({"huggingface": json.dumps(meta)})
    path = factory._path(root, factory.DATA_PATH, number)
    with pq.ParquetWriter(path, schema, compression="snappy", use_dictionary=True) as writer:
        for start, length in zip(starts - first, lengths, strict=True):
            writer.write_table(table.slice(int(start), int(length)).cast(schema))


def _frame(height: int, width: int, episode: int, t: int) -> np.ndarray:
    """A cheap frame that changes with the episode and the frame."""
    y, x = np.mgrid[0:height, 0:width]
    base = (x * 7 + y * 3 + t * 5 + episode * 11) % 256
    return np.stack([base, (base + 85) % 256, (base + 170) % 256], -1).astype(np.uint8)


def _write_videos(root, key, size, fps, lengths, file_of) -> dict[str, np.ndarray]:
    """One mp4 per data file's episodes, a continuous encode; each episode's span in it."""
    import av

    height, width = size
    name, options = factory._codec_options("h264")
    spans = {k: np.zeros(len(lengths)) for k in ("from_timestamp", "to_timestamp")}
    spans |= {
        "chunk_index": file_of // factory.CHUNKS_SIZE,
        "file_index": file_of % factory.CHUNKS_SIZE,
    }
    patterns = [_frame(height, width, e, t) for e in range(4) for t in range(8)]
    for number in range(int(file_of[-1]) + 1):
        mine = np.flatnonzero(file_of == number)
        path = factory._path(root, factory.VIDEO_PATH, number, video_key=key)
        with av.open(str(path), "w") as output:
            stream = output.add_stream(name, fps, options=options)
            stream.pix_fmt, stream.width, stream.height = "yuv420p", width, height
            stream.time_base = Fraction(1, fps)
            t = 0
            for episode in mine:
                spans["from_timestamp"][episode] = t / fps
                for k in range(int(lengths[episode])):
                    frame = av.VideoFrame.from_ndarray(patterns[(episode * 8 + k) % 32], "rgb24")
                    frame.pts = t
                    output.mux(stream.encode(frame))
                    t += 1
                spans["to_timestamp"][episode] = t / fps
            output.mux(stream.encode())
    return spans


def _write_episodes_meta(root, rows, stats, n) -> None:
    """meta/episodes/chunk-000/file-000.parquet: every episode, row groups of 10 episodes,
    with per-episode stats columns (lerobot's `stats/<key>/<stat>`; values are the
    dataset's, repeated: what matters here is their layout)."""
    columns = {k: v for k, v in rows.items()}
    for key, entry in stats.items():
        for stat in STAT_NAMES:
            value = np.asarray(entry[stat])
            flat = np.tile(value.reshape(-1).astype(np.float64 if stat != "count" else np.int64), n)
            array = pa.array(flat)
            for dim in reversed(value.shape):
                array = pa.ListArray.from_arrays(
                    pa.array(np.arange(0, len(array) + 1, dim, dtype=np.int32)), array
                )
            columns[f"stats/{key}/{stat}"] = array
    columns["meta/episodes/chunk_index"] = np.zeros(n, np.int64)
    columns["meta/episodes/file_index"] = np.zeros(n, np.int64)
    table = pa.table({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()})
    path = factory._path(root, factory.EPISODES_PATH, 0)
    pq.write_table(table, path, row_group_size=META_ROW_GROUP, compression="snappy")


# --- a converted dataset of DROID's shape ---


@dataclasses.dataclass(frozen=True)
class _ShardPlan:
    """What a process writing shards of the DROID-shaped dataset needs (pickled to it)."""

    root: str
    records_key: int
    dtype: list
    lengths: np.ndarray
    starts: np.ndarray
    task_of: np.ndarray
    segments: np.ndarray
    init: dict
    gop_record: dict
    cams: list


def _write_shards(plan: _ShardPlan, shards: list[int]) -> None:
    """Writes shards `shards` (EPISODES_PER_SHARD episodes each), sealed as converted."""
    from jaxload import format as fmt
    from jaxload.converters.writer import ShardWriter

    dtype = np.dtype(plan.dtype)
    for shard in shards:
        writer = ShardWriter(
            plan.root, shard_bytes=1 << 62, first_shard=shard, record_seed=plan.records_key
        )
        first = shard * EPISODES_PER_SHARD
        for e in range(first, min(first + EPISODES_PER_SHARD, len(plan.lengths))):
            rows = np.zeros(plan.lengths[e], dtype)
            t = np.arange(plan.lengths[e])
            for name in dtype.names:
                rows[name] = {"timestamp": t / DROID_FPS, "frame_index": t, "episode_index": e,
                              "index": plan.starts[e] + t, "task_index": plan.task_of[e]}.get(name, 0)  # fmt: skip
            raw = rows.tobytes()
            size = fmt.FRAMES_PER_BLOCK * dtype.itemsize
            blocks = [[raw[i : i + size] for i in range(0, len(raw), size)]]
            blocks += [
                [plan.init[c]] + [plan.gop_record[c]] * int(plan.segments[e]) for c in plan.cams
            ]
            writer.append_episode(blocks)
        writer.close()


# --- the template -----------------------------------------------------------------------


def write_template_source(root: Path, size: tuple[int, int] = (36, 64)) -> Path:
    """The LeRobot source of the DROID-shaped dataset's template: DROID's cameras (small:
    `size`), state and action, one episode of two GOPs."""
    cameras = {key: size for key in DROID_CAMERAS}
    return factory.write_lerobot_v3(
        root, fps=DROID_FPS, episode_lengths=(8,), cameras=cameras, state_dim=8, action_dim=7
    )


def write_droid_shaped(
    root: Path,
    template: Path,
    *,
    lengths: np.ndarray | None = None,
    tasks: int = DROID_TASKS,
    seed: int = 0,
    all_shards: bool = False,
    workers: int = 1,
) -> Path:
    """A converted dataset of DROID's counts (or of episodes of `lengths`, `tasks` distinct
    tasks) from the converted `template` (module docstring); returns `root`.

    Args:
        all_shards: write every shard (~22 million tiny records at DROID's counts), not
            only shard 0; the other shards' offset indexes (remote reads only) are not
            written.
        workers: processes writing shards.
    """
    from jaxload import format as fmt
    from jaxload.converters.writer import write_offsets
    from jaxload.format import sealing
    from jaxload.format.reader import DatasetFiles

    root = Path(root)
    (root / "meta").mkdir(parents=True, exist_ok=False)
    files = DatasetFiles(template)
    info = files.info
    cams = sorted(info.cameras)
    gop = info.cameras[cams[0]].gop
    init = {c: files.read_gop(0, c, 0)[0] for c in cams}
    gop_record = {c: files.read_gop(0, c, 0)[1] for c in cams}
    files.readers.close()
    lengths = droid_lengths(seed=seed) if lengths is None else np.asarray(lengths, np.int64)
    n, starts = len(lengths), np.cumsum(lengths) - lengths
    blocks, segments = -(-lengths // fmt.FRAMES_PER_BLOCK), -(-lengths // gop)
    shard = np.arange(n) // EPISODES_PER_SHARD
    per_episode = blocks + len(cams) * (1 + segments)
    ends = np.cumsum(per_episode)
    first_in_shard = np.r_[0, np.flatnonzero(np.diff(shard)) + 1]
    shard_base = np.repeat(ends[first_in_shard] - per_episode[first_in_shard], np.bincount(shard))
    frames_record_start = ends - per_episode - shard_base
    shard_records = np.bincount(shard, weights=per_episode).astype(np.int64)
    rng = np.random.default_rng(seed)
    task_of = rng.integers(0, tasks, n)
    task_names = np.array([f"droid task {t}: put the marker in the cup" for t in range(tasks)])
    seed_ = int(hashlib.sha256(b"droid-shaped").hexdigest()[:16], 16)

    table = {
        "episode_index": pa.array(np.arange(n)),
        "length": pa.array(lengths),
        "dataset_from_index": pa.array(starts),
        "tasks": pa.ListArray.from_arrays(
            pa.array(np.arange(n + 1, dtype=np.int32)), pa.array(task_names[task_of])
        ),
        "shard": pa.array(shard),
        "frames_record_start": pa.array(frames_record_start),
    }
    offsets_ = pa.array(np.r_[0, np.cumsum(segments)].astype(np.int32))
    local = (
        np.arange(int(segments.sum())) - np.repeat(np.r_[0, np.cumsum(segments)[:-1]], segments)
    ) * gop
    record = frames_record_start + blocks
    for cam in cams:
        table[fmt.segment_column(cam, "record_start")] = pa.array(record)
        table[fmt.segment_column(cam, "segment_starts")] = pa.ListArray.from_arrays(
            offsets_, pa.array(local)
        )
        table[fmt.segment_column(cam, "psnr_min")] = pa.array(np.full(n, 45.0))
        record = record + 1 + segments
    schema = fmt.episodes_table([], cams).schema
    pq.write_table(pa.table(table, schema=schema), root / fmt.EPISODES_PATH)
    pq.write_table(
        pa.table({"task_index": np.arange(tasks), "task": task_names}), root / fmt.TASKS_PATH
    )
    for extra in (fmt.STATS_PATH, "meta/stats_sketch.npz"):
        if (template / extra).exists():
            shutil.copy(template / extra, root / extra)
    fingerprint = hashlib.sha256(f"droid-shaped {seed} {info.fingerprint}".encode()).hexdigest()
    assert not any(f.is_string for f in info.features.values()), "string features: not built"
    droid = info.__class__(
        fps=DROID_FPS,
        total_frames=int(lengths.sum()),
        total_episodes=n,
        features=info.features,
        cameras=info.cameras,
        num_shards=len(shard_records),
        fingerprint=fingerprint,
        source={"format": "lerobot", "codebase_version": "v3.0", "repo_id": "droid-shaped"},
        converter=info.converter,
        record_seed=seed_,
        shard_records=tuple(int(c) for c in shard_records),
    )
    # The record key covers the metadata's digests (format 5): the same bytes the
    # converter streams (`sealing.TableDigests`), over whole columns here.
    episodes_digests = {
        "episode_index": sealing.ints_digest(np.arange(n)),
        "length": sealing.ints_digest(lengths),
        "tasks": sealing.string_lists_digest(np.ones(n, np.int64), pa.array(task_names[task_of])),
    } | {fmt.segment_column(c, "segment_starts"): sealing.int_lists_digest(segments, local)
         for c in cams}  # fmt: skip
    tasks_digest = sealing.tasks_digest(np.arange(tasks), task_names.tolist())  # format 6
    droid = dataclasses.replace(
        droid,
        metadata_xxh3=droid.digests()
        | {sealing.EPISODES: episodes_digests, sealing.TASKS: tasks_digest},
        stats_xxh3=info.stats_xxh3,  # the template's stats files, copied unchanged
    )

    # Shards for real, record by record as the converter lays them out, in `workers`
    # processes: shard 0, or every shard (`all_shards`).
    dtype = info.frame_dtype
    count = len(shard_records) if all_shards else 1
    plan = _ShardPlan(str(root), droid.records_key, dtype.descr, lengths, starts, task_of,
                      segments, init, gop_record, cams)  # fmt: skip
    chunks = [range(k, count, max(1, workers)) for k in range(max(1, workers))]
    if workers > 1 and count > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            pool.starmap(_write_shards, [(plan, list(c)) for c in chunks])
    else:
        _write_shards(plan, list(range(count)))
    offsets = write_offsets(root, [int(shard_records[0])])

    droid = dataclasses.replace(
        droid, offsets_xxh3=offsets + ("0" * 16,) * (len(shard_records) - 1)
    )
    fmt.write_json_atomic(root / fmt.INFO_PATH, droid.to_json())
    return root
