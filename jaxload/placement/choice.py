"""`decode_device="auto"` by measurement: the CPU readers or the devices (NVDEC).

Which side decodes faster depends on the host and the dataset: on an H200 host with 16
cores, NVDEC and the CPU workers decoded 480x640 frames at the same rate, while at 96x128
the CPU workers were 7x faster (benchmarks/RESULTS.md, "GPU decoding"). So where the
devices can decode, make_loader times both sides on the dataset's own first batches, for
about a second each, before any worker starts:

* the CPU: as many threads as the readers will decode in (workers x read threads, at most
  the cores), each decoding the batches' frames over and over;
* the devices: `DeviceDecoder` with `options.decode_threads` decodes in flight per device
  (after one untimed pass that creates the decoders).

and keeps the faster. The choice and the rates are in `loader.spec.placement.choice`, the
loader's repr and a log line. It measures on what is read (`jaxload.sources.read.ReadSpec`),
before any loader spec exists (`jaxload.placement.decide`):

    choice = measure_decode_paths(read, cameras, options, decode_threads)
    choice.device, choice.reasons
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# Seconds each side is timed for.
MEASURE_S = 1.0
# Batches read for the measurement (decoded over and over).
MEASURE_BATCHES = 2


@dataclasses.dataclass(frozen=True)
class DecodeChoice:
    """Where `decode_device="auto"` decodes, and why.

    Attributes:
        device: "cpu", or "cuda" (or "device" in tests).
        reasons: why, in words (logged, and in the loader's repr).
        cpu_frames_per_s: the readers' decode rate measured (None: not measured).
        device_frames_per_s: the devices' decode rate measured (None: not measured).
    """

    device: str
    reasons: tuple[str, ...]
    cpu_frames_per_s: float | None = None
    device_frames_per_s: float | None = None

    def describe(self) -> str:
        if self.cpu_frames_per_s is None or self.device_frames_per_s is None:
            return "; ".join(self.reasons)
        return (
            f"measured {self.cpu_frames_per_s:,.0f} frames/s on the CPU readers, "
            f"{self.device_frames_per_s:,.0f} on the devices: {self.device}"
        )


def choose_by_rates(
    cpu: float, devices: float, device_path: str = "cuda"
) -> tuple[str, tuple[str, ...]]:
    """The faster path: "cpu" at `cpu` frames/s or `device_path` at `devices` (the CPU on
    a tie: nothing travels compressed to the training process)."""
    measured = {"cpu": cpu, device_path: devices}
    best = max(measured, key=lambda path: measured[path])
    why = ", ".join(f"{path} {rate:,.0f}" for path, rate in measured.items())
    return best, (f"decode_device='auto' -> {best!r}, measured frames/s: {why}",)


def measure_decode_paths(
    read: Any,
    cameras: Sequence[str],
    options: Any,
    decode_threads: int,
    device_path: str | None = None,
) -> DecodeChoice:
    """Times the CPU readers and the devices decoding `cameras` of the first batches of
    `read` and chooses.

    Args:
        read: what is read (`jaxload.sources.read.ReadSpec`, with a `sharding`).
        cameras: the batch keys of the cameras the devices would decode.
        options: the resolved `jaxload.PipelineOptions` (the readers' threads, the timeout).
        decode_threads: decodes in flight per device.
        device_path: what the devices' path is called: "cuda" on GPUs, else "device"
            (tests, where CPU devices stand in for GPUs).

    Example:
        choice = measure_decode_paths(read, ("observation.images.top",), options, 2)
        print(choice.describe())
    """
    if device_path is None:
        gpus = all(d.platform == "gpu" for d in read.sharding.addressable_devices)
        device_path = "cuda" if gpus else "device"
    count = min(MEASURE_BATCHES, read.num_batches(0) or MEASURE_BATCHES)
    batches = [_encoded_batch(read, cameras, k) for k in range(count)]
    frames = sum(v.gop_index.size for batch in batches for v in batch.values())
    cpu = _cpu_rate(batches, frames, _reader_threads(options))
    devices = _device_rate(read, batches, frames, options, decode_threads)
    device, reasons = choose_by_rates(cpu, devices, device_path)
    choice = DecodeChoice(device, reasons, cpu, devices)
    log.info("%s", choice.describe())
    return choice


def _encoded_batch(read: Any, cameras: Sequence[str], k: int) -> dict[str, Any]:
    """Batch k's frames of `cameras`, compressed, in this host's row order (each dataset
    read once, as the read stage reads it)."""
    from jaxload.batch.schema import rename_key
    from jaxload.decode.on_device import merge_encoded

    dataset_ids, positions = read.stream.locate(read.positions(0, k))
    parts: dict[str, list] = {cam: [] for cam in cameras}
    for d in np.unique(dataset_ids).tolist():
        where = np.flatnonzero(dataset_ids == d)
        _, videos = read.datasets[d].read(positions[where].tolist())
        for raw_key, video in videos.items():
            key = rename_key(raw_key, read.key_maps[d])
            if key in parts:
                parts[key].append((where, video))
    return {cam: merge_encoded(p, len(dataset_ids)) for cam, p in parts.items()}


def _reader_threads(options: Any) -> int:
    """The threads the readers decode in: workers x read threads, at most the cores."""
    threads = max(1, options.num_workers) * max(1, options.read_threads)
    return max(1, min(threads, os.cpu_count() or 1))


def _cpu_rate(batches: list[dict], frames: int, threads: int) -> float:
    """Frames/s of `threads` threads each decoding `batches` over and over."""
    from jaxload.decode.frames import decode_grouped

    def decode_all() -> None:
        for batch in batches:
            decode_grouped(list(batch.values()))

    counts = [0] * threads
    stop = threading.Event()

    def run(i: int) -> None:
        while not stop.is_set():
            decode_all()
            counts[i] += 1

    began = time.perf_counter()
    pool = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
    for thread in pool:
        thread.start()
    stop.wait(MEASURE_S)
    stop.set()
    for thread in pool:
        thread.join()
    return sum(counts) * frames / (time.perf_counter() - began)


def _device_rate(
    read: Any, batches: list[dict], frames: int, options: Any, decode_threads: int
) -> float:
    """Frames/s of the devices decoding `batches` with `decode_threads` decodes in flight."""
    import jax

    from jaxload.batch import hosts
    from jaxload.batch.schema import BatchSchema
    from jaxload.decode.on_device import DeviceDecoder

    fields = BatchSchema([d.element_spec() for d in read.datasets], read.key_maps).fields
    shapes = {cam: fields[cam].shape for cam in batches[0]}
    decoder = DeviceDecoder(decode_threads, options.worker_timeout_s)

    def decode(batch: dict) -> None:
        arrays = decoder.decode_to_global(
            batch,
            shapes,
            lambda ndim: hosts.sharding_for_rank(read.sharding, ndim),
            read.rows,
            len(read.rows),
        )
        jax.block_until_ready(arrays)

    try:
        for batch in batches:  # untimed: creates the decoders
            decode(batch)
        passes, began = 0, time.perf_counter()
        while time.perf_counter() - began < MEASURE_S:
            for batch in batches:
                decode(batch)
            passes += 1
        return passes * frames / (time.perf_counter() - began)
    finally:
        decoder.close()
