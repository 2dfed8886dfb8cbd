"""Loader settings from measurements of this machine and the dataset.

`jaxload.placement.machine.probe_machine()` reads cores, memory and GPUs (with which codecs
their NVDEC decodes); `jaxload.autotune.probe.probe_dataset()` measures record sizes
and decode times. `recommend()` turns both into make_loader settings; the rules are in
docs/METADATA.md ("Autotune"), and every choice carries its reason. The decode device
follows the loader's own policy (`jaxload.placement.device`).

    >>> from jaxload.autotune import recommend
    >>> windows = {"action": [k / 10 for k in range(4)]}
    >>> rec = recommend("out/demo", delta_timestamps=windows, probe_gpu_decode=False)
    >>> rec.global_batch_size % rec.batch_size_min
    0
    >>> sorted(rec.knobs())
    ['decode_device', 'num_workers', 'prefetch', 'read_threads', 'worker_buffer_size']
    >>> sorted(rec.loader_kwargs())  # for make_loader
    ['decode_device', 'options']

`print(rec.summary())` shows what was measured and why; `rec.make_loader_call()` is a
paste-ready `jaxload.make_loader(...)` call.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.autotune.probe import DatasetProbe, probe_dataset
from jaxload.episode_dataset import is_dataset
from jaxload.options import CORES_PER_PROCESS, PipelineOptions, split_cores
from jaxload.placement.device import (
    DECODE_DEVICES,
    decide_decode_device,
    probe_torchcodec_cuda,
)
from jaxload.placement.machine import GiB, MachineInfo, probe_machine

log = logging.getLogger("jaxload.autotune.recommend")


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

    def knobs(self) -> dict[str, Any]:
        """The `PipelineOptions` fields this recommends."""
        return {
            "num_workers": self.num_workers,
            "read_threads": self.read_threads,
            "worker_buffer_size": self.worker_buffer_size,
            "prefetch": self.prefetch,
            "decode_device": self.decode_device,
        }

    def loader_kwargs(self) -> dict[str, Any]:
        """The make_loader keyword arguments this recommends (not global_batch_size):
        `decode_device` and `options` (a `jaxload.PipelineOptions` with the rest)."""
        knobs = self.knobs()
        device = knobs.pop("decode_device")
        return {"decode_device": device, "options": PipelineOptions(**knobs)}

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
        knobs = self.knobs()
        lines.append(f"    decode_device={knobs.pop('decode_device')!r},")
        fields = ", ".join(f"{k}={v!r}" for k, v in knobs.items())
        lines.append(f"    options=jaxload.PipelineOptions({fields}),")
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
            **self.knobs(),
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
    decode on (default: `jaxload.placement.device.DECODE_DEVICES`); `probe_gpu_decode`
    tries a torchcodec CUDA decode when there is a GPU (default: when the loader could use
    it; it creates a CUDA context in this process).
    """
    items = (
        [paths_or_datasets]
        if isinstance(paths_or_datasets, str | os.PathLike) or is_dataset(paths_or_datasets)
        else list(paths_or_datasets)
    )
    if probes is None:
        probes = [probe_dataset(d, delta_timestamps=delta_timestamps) for d in items]
    machine = machine or probe_machine()
    if decode_devices is None:
        decode_devices = DECODE_DEVICES
    if probe_gpu_decode is None:
        probe_gpu_decode = "cuda" in decode_devices
    cams = [(p.path, cam) for p in probes for cam in p.cameras]
    if probe_gpu_decode and machine.gpus and machine.torchcodec_cuda is None and cams:
        path, cam = cams[0]
        machine = dataclasses.replace(machine, torchcodec_cuda=probe_torchcodec_cuda(path, cam))
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
    """What `PipelineOptions(autotune=True)` applies: the recommended knobs, with
    the ones the caller set explicitly (`overrides`, non-None values) kept, logged once
    on the "jaxload.autotune.recommend" logger with the reasons.

    Example (inside make_loader, after opening the datasets)::

        knobs = tuned_loader_kwargs(datasets, delta_timestamps=delta_timestamps,
                                    overrides={"num_workers": num_workers})
    """
    rec = recommend(datasets, delta_timestamps=delta_timestamps, host_count=host_count)
    kwargs = rec.knobs()
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
    device = decide_decode_device(machine, codecs, decode_devices, reasons)
    if device == "cuda" and "cpu" in decode_devices:
        # Which of the CPU readers and the devices is faster depends on the host and the
        # frames (on an H200: the CPU at 96x128, alike at 480x640): make_loader times them
        # on the dataset's first batches (jaxload.placement.choice).
        return "auto"
    return device
