"""Measurements of a dataset for autotune: record sizes, decode times on a sample of its
video segments (ms per frame per camera, and per random access) and whole samples (ms per
sample, with the windows asked for). `jaxload.autotune.recommend` turns them, with
the machine's (`jaxload.placement.machine`), into loader settings.

    >>> from jaxload.autotune import probe_dataset
    >>> probe = probe_dataset("out/demo", segments=2, samples=2)
    >>> probe.episodes, probe.frames, sorted(probe.cameras)
    (4, 20, ['observation.images.top'])
    >>> probe.cameras["observation.images.top"].decode_ms_per_frame > 0
    True
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.episode_dataset import EpisodeDataset
from jaxload.format.reader import DatasetFiles


@dataclasses.dataclass(frozen=True)
class CameraProbe:
    """Sizes and decode times of one camera's stored segments."""

    codec: str
    height: int
    width: int
    segment_bytes: float  # mean stored bytes per segment (one GOP)
    frames_per_segment: float
    decode_ms_per_frame: float  # decoding a whole segment, per frame
    decode_ms_random: float  # one frame from the middle of a segment, decoder creation included
    frames_per_sample: int  # frames a sample needs (window length, 1 without window)
    segments_measured: int


@dataclasses.dataclass(frozen=True)
class DatasetProbe:
    """What one sample of a dataset costs to store, read and decode here."""

    path: str
    frames: int
    episodes: int
    frame_record_bytes: int  # tabular bytes per frame
    sample_bytes: int  # bytes of one collated sample (images uint8)
    sample_ms: float  # reading and decoding one sample, measured in this process
    cameras: dict[str, CameraProbe]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def probe_dataset(
    dataset: Any,
    *,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    segments: int = 8,
    samples: int = 16,
    seed: int = 0,
) -> DatasetProbe:
    """Measures a dataset (a path or a JaxloadDataset) on a deterministic sample.

    Decodes `segments` segments per camera (spread over the episodes) and reads `samples`
    random samples with `delta_timestamps` (a JaxloadDataset keeps its own windows).
    """
    from jaxload.dataset import JaxloadDataset

    ds = (
        JaxloadDataset(dataset, delta_timestamps=delta_timestamps)
        if isinstance(dataset, str | os.PathLike)
        else dataset
    )
    if not isinstance(ds, EpisodeDataset) or ds.storage is None:
        # A map-style dataset of the caller's: no records, GOPs or cameras to measure.
        name = ds.name if isinstance(ds, EpisodeDataset) else type(ds).__name__
        raise ValueError(
            f"autotune measures jaxload datasets (a path, or jaxload.open's); {name} is not "
            "one: set PipelineOptions' knobs yourself instead of autotune=True"
        )
    spec = ds.element_spec()
    sample_bytes = sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize for s in spec.values())
    cameras = {cam: _probe_camera(ds, cam, segments, spec) for cam in ds.camera_keys}
    return DatasetProbe(
        path=ds.path,
        frames=len(ds),
        episodes=len(ds.episode_index),
        frame_record_bytes=int(ds.info.frame_dtype.itemsize),
        sample_bytes=int(sample_bytes),
        sample_ms=_time_samples(ds, samples, seed),
        cameras=cameras,
    )


def _probe_camera(ds: Any, cam: str, count: int, spec: Mapping[str, Any]) -> CameraProbe:
    from jaxload.decode.frames import decode_gops

    info, shape = ds.info.cameras[cam], spec[cam].shape
    inits, segments, lengths = _sample_segments(ds.storage, ds.episode_index, cam, count)

    def decode(init: bytes, gop: bytes, frames: list[int]) -> None:
        decode_gops(init, [gop], [frames], info.codec, info.width, info.height)

    decode(inits[0], segments[0], [0])  # the first call loads codecs: not part of the timing
    # Medians over the GOPs: robust to a busy machine's hiccups.
    probes = list(zip(inits, segments, lengths))
    per_frame = np.median([_ms(decode, i, seg, list(range(n))) / n for i, seg, n in probes])
    random_access = np.median([_ms(decode, i, seg, [n // 2]) for i, seg, n in probes])
    return CameraProbe(
        codec=info.codec,
        height=info.height,
        width=info.width,
        segment_bytes=float(np.mean([len(s) for s in segments])),
        frames_per_segment=float(np.mean(lengths)),
        decode_ms_per_frame=float(per_frame),
        decode_ms_random=float(random_access),
        frames_per_sample=int(shape[0]) if len(shape) == 4 else 1,
        segments_measured=len(segments),
    )


def _ms(fn: Any, *args: Any) -> float:
    started = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - started) * 1e3


def _sample_segments(
    root: Any, episodes: Sequence[int], cam: str, count: int
) -> tuple[list[bytes], list[bytes], list[int]]:
    """A middle segment (full length where there are several) of `count` episodes spread
    over the selection, with its init segment and frame count."""
    files = DatasetFiles(root)
    selected = np.flatnonzero(np.isin(files.episodes.index, np.asarray(episodes, np.int64)))
    picks = np.unique(np.linspace(0, len(selected) - 1, count).round().astype(int))
    inits, segments, lengths = [], [], []
    try:
        for row in (int(selected[i]) for i in picks):
            s = files.episodes.segments[cam].count(row) // 2
            init, segment = files.read_gop(row, cam, s)
            inits.append(init)
            segments.append(segment)
            lengths.append(files.gop_length(row, cam, s))
    finally:
        files.readers.close()
    return inits, segments, lengths


def _time_samples(ds: Any, count: int, seed: int) -> float:
    positions = np.random.default_rng(seed).integers(0, len(ds), size=count + 2)
    ds.__getitems__(positions[:2].tolist())  # warm up readers and decoders
    started = time.perf_counter()
    ds.__getitems__(positions[2:].tolist())
    return (time.perf_counter() - started) * 1e3 / count
