"""Loader settings from measurements of this machine and the dataset.

`probe_machine()` reads cores (affinity and cgroup quota), RAM (and the cgroup limit), the
GPUs and their memory (nvidia-smi) and which codecs their NVDEC decodes (a table of GPU
architectures, by compute capability, else by name). `probe_dataset()` reads record sizes
and times decoding on a sample of video segments (ms per frame per camera, and per random
access) and whole samples (ms per sample, with the windows asked for). `recommend()` turns
both into make_loader settings; the rules are in docs/METADATA.md and every choice carries
its reason.

Example:
    >>> rec = recommend("out/pusht", delta_timestamps={"action": [k / 10 for k in range(16)]})
    >>> print(rec.summary())                      # what was measured and why
    >>> loader = jaxload.make_loader("out/pusht", global_batch_size=rec.global_batch_size,
    ...                              **rec.loader_kwargs())
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("jaxload.tools.autotune.recommend")

# --- the dataset --------------------------------------------------------------------------------


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
        dataset
        if isinstance(dataset, JaxloadDataset)
        else JaxloadDataset(dataset, delta_timestamps=delta_timestamps)
    )
    spec = ds.element_spec()
    sample_bytes = sum(
        int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in spec.values()
    )
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

    info, shape = ds.info.cameras[cam], spec[cam][0]
    inits, segments, lengths = _sample_segments(ds.path, ds.episode_index, cam, count)

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
    root: str, episodes: Sequence[int], cam: str, count: int
) -> tuple[list[bytes], list[bytes], list[int]]:
    """A middle segment (full length where there are several) of `count` episodes spread
    over the selection, with its init segment and frame count; read through the format's
    public layout."""
    import pyarrow.parquet as pq
    from array_record.python.array_record_module import ArrayRecordReader

    from jaxload import format as fmt

    start_col, starts_col = (
        fmt.segment_column(cam, "record_start"),
        fmt.segment_column(cam, "segment_starts"),
    )
    table = pq.read_table(
        Path(root) / fmt.EPISODES_PATH,
        columns=["episode_index", "length", "shard", start_col, starts_col],
    ).to_pylist()
    selected = [r for r in table if r["episode_index"] in set(int(e) for e in episodes)]
    picks = np.unique(np.linspace(0, len(selected) - 1, count).round().astype(int))
    inits, segments, lengths, readers = [], [], [], {}
    try:
        for row in (selected[i] for i in picks):
            starts, s = row[starts_col], len(row[starts_col]) // 2
            end = starts[s + 1] if s + 1 < len(starts) else row["length"]
            shard = int(row["shard"])
            if shard not in readers:
                path = Path(root) / fmt.shard_path(shard)
                readers[shard] = ArrayRecordReader(str(path), fmt.READER_OPTIONS)
            first = int(row[start_col])
            init, segment = readers[shard].read([first, fmt.segment_record(first, s)])
            inits.append(init)
            segments.append(segment)
            lengths.append(int(end - starts[s]))
    finally:
        for reader in readers.values():
            reader.close()
    return inits, segments, lengths


def _time_samples(ds: Any, count: int, seed: int) -> float:
    positions = np.random.default_rng(seed).integers(0, len(ds), size=count + 2)
    ds.__getitems__(positions[:2].tolist())  # warm up readers and decoders
    started = time.perf_counter()
    ds.__getitems__(positions[2:].tolist())
    return (time.perf_counter() - started) * 1e3 / count


# --- the recommendation -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """make_loader settings for one machine and dataset (or mixture), with reasons."""

    num_workers: int
    read_threads: int
    worker_buffer_size: int
    prefetch: int
    decode_device: str
    batch_size_min: int
    batch_size_max: int
    global_batch_size: int
    samples_per_s: float  # estimated loader throughput with these settings
    reasons: tuple[str, ...]
    machine: MachineInfo
    datasets: tuple[DatasetProbe, ...]
    delta_timestamps: Mapping[str, Sequence[float]] | None = None

    def loader_kwargs(self) -> dict[str, Any]:
        """The make_loader keyword arguments this recommends (not global_batch_size)."""
        return {
            "num_workers": self.num_workers,
            "read_threads": self.read_threads,
            "worker_buffer_size": self.worker_buffer_size,
            "prefetch": self.prefetch,
            "decode_device": self.decode_device,
        }

    def make_loader_call(self) -> str:
        """A paste-ready `jaxload.make_loader(...)` call."""
        paths = [d.path for d in self.datasets]
        target = repr(paths[0]) if len(paths) == 1 else repr(paths)
        lines = [
            "jaxload.make_loader(",
            f"    {target},",
            f"    global_batch_size={self.global_batch_size},  # {self.batch_size_min}.."
            f"{self.batch_size_max} here, a multiple of {self.batch_size_min}",
        ]
        if self.delta_timestamps:
            lines.append(f"    delta_timestamps={dict(self.delta_timestamps)!r},")
        lines += [f"    {k}={v!r}," for k, v in self.loader_kwargs().items()]
        return "\n".join([*lines, ")"])

    def summary(self) -> str:
        """Measurements, settings and reasons, for people."""
        m = self.machine
        gpus = ", ".join(
            f"{n} x {g.name} ({g.memory_bytes / GiB:.0f} GiB, {g.architecture}, NVDEC "
            f"{'/'.join(sorted(g.nvdec_codecs))})"
            for g, n in collections.Counter(m.gpus).items()
        )
        lines = [
            f"machine: {m.cpu_count} cores, {m.memory_available / GiB:.1f} of "
            f"{m.memory_total / GiB:.1f} GiB free, GPUs: {gpus or 'none'}"
            + (
                ""
                if m.torchcodec_cuda is None
                else f", torchcodec CUDA decode: {m.torchcodec_cuda}"
            ),
            *(f"  note: {n}" for n in m.notes),
        ]
        for d in self.datasets:
            lines.append(
                f"dataset {d.path}: {d.episodes} episodes, {d.frames} frames, "
                f"{d.frame_record_bytes} B tabular per frame, {d.sample_bytes / 1024:.1f} KiB "
                f"per sample, {d.sample_ms:.2f} ms per sample (read + decode, 1 thread)"
            )
            for cam, c in d.cameras.items():
                lines.append(
                    f"  {cam}: {c.codec} {c.height}x{c.width}, {c.segment_bytes / 1024:.1f} KiB "
                    f"per {c.frames_per_segment:.1f}-frame segment, decode "
                    f"{c.decode_ms_per_frame:.2f} ms/frame sequential, "
                    f"{c.decode_ms_random:.2f} ms per random frame, {c.frames_per_sample} "
                    f"frame(s) per sample"
                )
        lines += [
            f"recommended: num_workers={self.num_workers} read_threads={self.read_threads} "
            f"worker_buffer_size={self.worker_buffer_size} prefetch={self.prefetch} "
            f"decode_device={self.decode_device!r}",
            f"global batch size: {self.batch_size_min}..{self.batch_size_max} "
            f"(suggested {self.global_batch_size}); est. {self.samples_per_s:,.0f} samples/s",
            *(f"  - {r}" for r in self.reasons),
            "paste:",
            self.make_loader_call(),
        ]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.loader_kwargs(),
            "batch_size_min": self.batch_size_min,
            "batch_size_max": self.batch_size_max,
            "global_batch_size": self.global_batch_size,
            "samples_per_s": self.samples_per_s,
            "reasons": list(self.reasons),
            "machine": self.machine.to_json(),
            "datasets": [d.to_json() for d in self.datasets],
        }


def recommend(
    paths_or_datasets: Any,
    *,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    machine: MachineInfo | None = None,
    probes: Sequence[DatasetProbe] | None = None,
    target_samples_per_s: float | None = None,
    host_count: int = 1,
    decode_devices: Sequence[str] | None = None,
    probe_gpu_decode: bool | None = None,
) -> Recommendation:
    """make_loader settings for these datasets on this machine.

    `machine` and `probes` replace the measurements (tests, or planning for another host);
    `target_samples_per_s` (the trainer's need) caps the workers; `host_count` scales the
    batch bounds to the global batch; `decode_devices` are the devices the loader can
    decode on (default: `jaxload.pipeline.loader.DECODE_DEVICES`, or ("cpu",)); `probe_gpu_decode`
    tries a torchcodec CUDA decode when there is a GPU (default: when the loader could use
    it; it creates a CUDA context in this process).
    """
    items = (
        [paths_or_datasets]
        if isinstance(paths_or_datasets, str | os.PathLike)
        or hasattr(paths_or_datasets, "episode_lengths")
        else list(paths_or_datasets)
    )
    if probes is None:
        probes = [probe_dataset(d, delta_timestamps=delta_timestamps) for d in items]
    machine = machine or probe_machine()
    if decode_devices is None:
        decode_devices = _loader_decode_devices()
    if probe_gpu_decode is None:
        probe_gpu_decode = "cuda" in decode_devices
    cams = [(p.path, cam) for p in probes for cam in p.cameras]
    if probe_gpu_decode and machine.gpus and machine.torchcodec_cuda is None and cams:
        path, cam = cams[0]
        machine = dataclasses.replace(machine, torchcodec_cuda=_probe_cuda_on(path, cam))
    return _decide(
        machine, tuple(probes), target_samples_per_s, host_count, decode_devices, delta_timestamps
    )


def tuned_loader_kwargs(
    datasets: Any,
    *,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    host_count: int = 1,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What `make_loader(..., autotune=True)` applies: the recommended loader kwargs, with
    the ones the caller set explicitly (`overrides`, non-None values) kept, logged once
    on the "jaxload.tools.autotune.recommend" logger with the reasons.

    Example (inside make_loader, after opening the datasets):
        >>> knobs = tuned_loader_kwargs(datasets, delta_timestamps=delta_timestamps,
        ...                             overrides={"num_workers": num_workers})
    """
    rec = recommend(datasets, delta_timestamps=delta_timestamps, host_count=host_count)
    kwargs = rec.loader_kwargs()
    kept = {k: v for k, v in (overrides or {}).items() if v is not None and k in kwargs}
    kwargs.update(kept)
    log.info(
        "autotune: %s (kept from the call: %s; global batch %d..%d, est. %.0f samples/s); %s",
        ", ".join(f"{k}={v!r}" for k, v in kwargs.items()),
        sorted(kept) or "none",
        rec.batch_size_min,
        rec.batch_size_max,
        rec.samples_per_s,
        "; ".join(rec.reasons),
    )
    return kwargs


def _all_episodes(path: str) -> list[int]:
    import pyarrow.parquet as pq

    from jaxload import format as fmt

    table = pq.read_table(Path(path) / fmt.EPISODES_PATH, columns=["episode_index"])
    return table["episode_index"].to_pylist()


def _loader_decode_devices() -> tuple[str, ...]:
    try:
        from jaxload.pipeline import loader
    except ImportError:  # pragma: no cover - grain missing
        return ("cpu",)
    return tuple(getattr(loader, "DECODE_DEVICES", ("cpu",)))


# Rules (docs/METADATA.md, "Autotune"):
HOST_MEMORY_SHARE = 0.5  # of free RAM for worker processes
BATCH_MEMORY_SHARE = 0.25  # of free RAM for batches in flight
GPU_MEMORY_SHARE = 0.05  # of GPU memory for input batches (the model needs the rest)
MIN_WORKER_BYTES = 512 * 2**20
SUGGESTED_BATCH = 256


def _decide(
    machine: MachineInfo,
    probes: tuple[DatasetProbe, ...],
    target: float | None,
    host_count: int,
    decode_devices: Sequence[str],
    delta_timestamps: Mapping[str, Sequence[float]] | None,
) -> Recommendation:
    reasons = []
    frames = np.array([p.frames for p in probes], dtype=np.float64)
    sample_ms = float(np.average([p.sample_ms for p in probes], weights=frames))
    sample_bytes = max(p.sample_bytes for p in probes)
    has_video = any(p.cameras for p in probes)

    # Cores: the training process keeps some (JAX dispatch, prefetch thread, transfers);
    # without a GPU JAX computes on the CPU too, so it keeps half.
    reserve = max(1, machine.cpu_count // 8) if machine.gpus else max(1, machine.cpu_count // 2)
    budget = max(1, machine.cpu_count - reserve)
    reasons.append(
        f"{machine.cpu_count} cores, {reserve} kept for the training process "
        f"({'GPU training' if machine.gpus else 'JAX computes on the CPU'}): {budget} for loading"
    )
    from jaxload.pipeline.loader import CORES_PER_PROCESS, split_cores

    cores = budget if has_video else min(2, budget)
    if not has_video:
        reasons.append("no video: reading is cheap, at most 2 cores")
    if target:
        needed = max(1, math.ceil(1.25 * target * sample_ms / 1000))
        if needed < cores:
            reasons.append(
                f"{target:,.0f} samples/s wanted at {sample_ms:.2f} ms/sample: {needed} cores "
                "(25% headroom)"
            )
            cores = needed
    workers, read_threads = split_cores(cores)
    reasons.append(
        f"{cores} core(s): "
        + (
            f"{read_threads} read threads in the training process (up to {CORES_PER_PROCESS} "
            "cores no worker processes: faster start, no shared-memory copies)"
            if workers == 0
            else f"{workers} worker processes x {read_threads} read threads "
            f"(~{CORES_PER_PROCESS} cores per process before its GIL share saturates)"
        )
    )

    worker_buffer, prefetch = 2, 2
    per_worker = max(machine.process_rss, MIN_WORKER_BYTES)
    by_memory = int(HOST_MEMORY_SHARE * machine.memory_available // per_worker)
    if by_memory < workers:
        workers = max(0, by_memory)
        read_threads = max(2, math.ceil(cores / max(1, workers)))
        reasons.append(
            f"memory: {machine.memory_available / GiB:.1f} GiB free, ~{per_worker / GiB:.2f} GiB "
            f"per worker process: {workers} workers x {read_threads} read threads"
        )

    decode_device = _decode_device(machine, probes, decode_devices, reasons)

    devices = max(1, len(machine.gpus))
    step = devices * host_count
    in_flight = max(1, workers) * worker_buffer + prefetch + 2
    per_host = int(BATCH_MEMORY_SHARE * machine.memory_available // (in_flight * sample_bytes))
    bound = f"host RAM ({in_flight} batches in flight, {sample_bytes / 1024:.1f} KiB/sample)"
    if machine.gpus:
        per_device = int(
            GPU_MEMORY_SHARE
            * min(g.memory_bytes for g in machine.gpus)
            // ((prefetch + 1) * sample_bytes)
        )
        if per_device * devices < per_host:
            per_host, bound = (
                per_device * devices,
                f"GPU memory ({GPU_MEMORY_SHARE:.0%} for inputs)",
            )
    batch_max = max(step, (per_host * host_count) // step * step)
    reasons.append(
        f"global batch: a multiple of {step} ({devices} device(s) x {host_count} host(s)), at "
        f"most {batch_max} by {bound}"
    )
    suggested = min(batch_max, max(step, SUGGESTED_BATCH // step * step))
    rate = cores * (1000.0 / max(sample_ms, 1e-6))
    return Recommendation(
        num_workers=workers,
        read_threads=read_threads,
        worker_buffer_size=worker_buffer,
        prefetch=prefetch,
        decode_device=decode_device,
        batch_size_min=step,
        batch_size_max=batch_max,
        global_batch_size=suggested,
        samples_per_s=rate,
        reasons=tuple(reasons),
        machine=machine,
        datasets=probes,
        delta_timestamps=delta_timestamps,
    )


def _decode_device(
    machine: MachineInfo,
    probes: Sequence[DatasetProbe],
    decode_devices: Sequence[str],
    reasons: list[str],
) -> str:
    codecs = {c.codec for p in probes for c in p.cameras.values()}
    return decide_decode_device(machine, codecs, decode_devices, reasons)




