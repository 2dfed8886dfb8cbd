"""Runs one work unit: converts its episodes, in order, into one part file.

A part is an ArrayRecord file holding the unit's records exactly as they will sit in a
shard (per episode: frame blocks, then each camera's init segment and GOPs, cameras
sorted); the `UnitResult` carries what the metadata needs (lengths, tasks, record counts,
segment tables, fidelity). Parts are assembled into shards in episode order once every
unit is done, so the output does not depend on which worker ran which unit, or when.

This runs in worker processes (the local pool) or Ray tasks, never touching the job's
recorded state: only the process holding the lock records results.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter

from jaxload import format as fmt
from jaxload.converters import video
from jaxload.converters.episode import EpisodeResult, convert_episode
from jaxload.converters.lerobot_common import LeRobotSource
from jaxload.converters.plan import Unit
from jaxload.format import Feature, sealing


@dataclasses.dataclass
class UnitContext:
    """What every unit of a job needs; sent to each worker once."""

    source: LeRobotSource
    options: video.EncodeOptions
    features: dict[str, Feature]
    tmp_dir: str  # where parts are written (inside the job's partial directory)
    job: str  # plan id: names per-job caches on other machines


@dataclasses.dataclass
class UnitResult:
    """A finished unit, as a worker hands it back."""

    unit: int
    episodes: list[dict[str, Any]]  # per episode: metadata and record counts
    part_path: str | None  # the part file, when written where the main process sees it
    part_bytes: bytes | None = None  # or its bytes (a Ray task on another machine)
    input_bytes: int = 0
    retries: int = 0
    seconds: float = 0.0
    worker: str = ""
    # Each source file the unit read, with its stamp (converters/source_stamps.py)
    sources: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The JSON the job's manifest keeps for this unit (no part bytes)."""
        out = dataclasses.asdict(self)
        del out["part_path"], out["part_bytes"]
        return out


def convert_unit(context: UnitContext, unit: Unit, tmp_dir: str | None = None) -> UnitResult:
    """Converts the unit's episodes into a part file under tmp_dir (default: the job's)."""
    started = time.perf_counter()
    files = context.source.files
    retries_before = files.retries
    tmp = Path(tmp_dir or context.tmp_dir)
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"unit-{unit.index:05d}-{uuid.uuid4().hex[:12]}.array_record"
    writer = ArrayRecordWriter(str(path), fmt.WRITER_OPTIONS)
    episodes = []
    try:
        for episode in unit.episodes:
            result = convert_episode(context.source, episode, context.options, context.features)
            records = [record for block in result.record_blocks() for record in block]
            for record in records:
                writer.write(record)
            episodes.append(episode_record(result, sealing.episode_digest(records)))
        writer.close()
    except BaseException:
        writer.close()
        path.unlink(missing_ok=True)
        raise
    return UnitResult(
        unit=unit.index,
        episodes=episodes,
        part_path=str(path),
        input_bytes=unit.input_bytes,
        retries=files.retries - retries_before,
        seconds=time.perf_counter() - started,
        worker=f"{socket.gethostname()}:{os.getpid()}",
    )


def episode_record(result: EpisodeResult, payload_digest: bytes) -> dict[str, Any]:
    """An episode's metadata for the manifest: enough to rebuild its episodes.parquet row
    and the dataset's fidelity without the per-frame PSNR values, and the digest of its
    records (`sealing.episode_digest`: the content the output's records are keyed by,
    checked again when the part is assembled)."""
    return {
        "payload_sha256": payload_digest.hex(),
        "episode_index": result.episode_index,
        "length": result.length,
        "dataset_from_index": result.dataset_from_index,
        "tasks": result.tasks,
        "frame_records": len(result.frames),
        "strings": result.strings,
        "videos": {
            cam: {
                "segment_starts": [int(s) for s in stream.segment_starts],
                "psnr_min": _json_float(np.min(stream.psnr)),
                "psnr_sum": _json_float(np.sum(stream.psnr)),
                "psnr_count": len(stream.psnr),
            }
            for cam, stream in sorted(result.streams.items())
        },
    }


def _json_float(x: float) -> float | str:
    """JSON has no inf: a lossless stream (PSNR inf) is stored as "inf"."""
    return float(x) if math.isfinite(x) else "inf"
