"""Where the time goes in jaxload's loader, per batch.

    python benchmarks/profile_loader.py                 # small and large datasets
    python benchmarks/profile_loader.py --only small
    python benchmarks/profile_loader.py --only small --decode-device cuda   # on a GPU host
    python benchmarks/profile_loader.py --dataset runs/gpu_carry/data/small-h264 --decode-device cuda

Three measurements on each benchmark dataset, with the benchmark's windows and batch size:

1. The work one Grain worker does per batch (`ReadBatch.map`: read + decode + collate),
   run in this process on one thread, with timers around each stage: ArrayRecord reads
   (`ArrayRecordReader.read`), assembling the batch's mp4 from its GOP fragments
   (`jaxload.format.mp4.build_mp4`), torchcodec decoder creation (the decode backend's
   `open`, `jaxload.decode.backend`), decoding (`frames_at`), collation
   (`BatchSchema.collate`), and the rest of the reader's Python ("other").
2. IPC alone: the same pipeline shape (Grain `mp_prefetch` with the same workers and the
   loader's options: arrays under 64 KiB pickled, larger ones through shared memory, plain
   views in this process) carrying a ready-made batch of the same shapes, so it measures
   only moving batches from the workers to the main process.
3. The real loader (2 workers), for the end-to-end rate and its CPU time per sample in
   the main process versus all processes.

With `--decode-device cuda` (or "device": CPU devices, a dry run) it measures the devices'
decode path instead (`device_breakdown`): per batch and per call, the decode threads' time
in mp4 assembly, torchcodec decoder creation and decoding, and the decoders created per
1,000 batches.

Writes benchmarks/results_profile.json.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import bench_data  # noqa: E402
from benchmarks.bench_data import specs_for  # noqa: E402
from jaxload.decode.backend import OpenStream, TorchcodecBackend  # noqa: E402

STAGES = ("arrayrecord_read", "build_mp4", "decoder_create", "decode", "collate", "other")


class Timers:
    """Accumulated seconds per stage, with a context manager and a function wrapper."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self._lock = threading.Lock()  # decode threads time their stages at once

    @contextlib.contextmanager
    def time(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.seconds[stage] += time.perf_counter() - start
                self.calls[stage] += 1

    def wrap(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.time(stage):
                return fn(*args, **kwargs)

        return timed


@contextlib.contextmanager
def instrumented(timers: Timers) -> Iterator[None]:
    """Timers around the reader's stages, in this process.

    Decoding goes through a timed decode backend (`jaxload.decode.backend.use`). Reads and
    the mp4 assembly have no such seam: the one function that opens shards
    (`jaxload.format.shards.open_shard`) and `build_mp4` where the decode calls it
    (`jaxload.decode.frames`) are swapped for timed ones, and restored on exit.
    """
    from jaxload.decode import backend, frames
    from jaxload.format import shards

    with contextlib.ExitStack() as stack:
        stack.enter_context(
            mock.patch.object(shards, "open_shard", _timed_open_shard(timers, shards.open_shard))
        )
        stack.enter_context(
            mock.patch.object(frames, "build_mp4", timers.wrap("build_mp4", frames.build_mp4))
        )
        stack.enter_context(backend.use(TimedBackend(timers)))
        yield


def _timed_open_shard(timers: Timers, open_shard: Callable[..., Any]) -> Callable[..., Any]:
    """`open_shard` returning readers whose `read` is timed as "arrayrecord_read"."""

    class TimedReader:
        def __init__(self, reader: Any) -> None:
            self._reader = reader

        def read(self, *args: Any) -> Any:
            with timers.time("arrayrecord_read"):
                return self._reader.read(*args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._reader, name)

    return lambda *args, **kwargs: TimedReader(open_shard(*args, **kwargs))


class TimedBackend(TorchcodecBackend):
    """The default decode backend, timed: opening an mp4 as "decoder_create" (torchcodec's
    decoder is made there), each `frames_at` as "decode"."""

    def __init__(self, timers: Timers) -> None:
        self.timers = timers

    def open(self, mp4: bytes, device: str) -> OpenStream:
        with self.timers.time("decoder_create"):
            stream = super().open(mp4, device)
        return _TimedStream(stream, self.timers)


class _TimedStream:
    def __init__(self, stream: OpenStream, timers: Timers) -> None:
        self._stream, self._timers = stream, timers

    def frames_at(self, indices: Sequence[int]) -> Any:
        with self._timers.time("decode"):
            return self._stream.frames_at(indices)


def stage_breakdown(path: Path, batch_size: int, batches: int, seed: int = 0) -> dict:
    """Per-batch seconds of each stage of ReadBatch.map, one thread, this process."""
    from jaxload.options import PipelineOptions
    from jaxload.pipeline.make_loader import make_loader
    from jaxload.tools import bench

    windows = bench.bench_windows(path)
    loader = make_loader(
        path,
        global_batch_size=batch_size,
        seed=seed,
        delta_timestamps=windows,
        options=PipelineOptions(num_workers=0),
        host_index=0,
        host_count=1,
    )
    read_batch = loader.read_batch()
    timers = Timers()
    schema = read_batch.spec.schema
    schema.collate = timers.wrap("collate", schema.collate)
    with instrumented(timers):
        read_batch.map(0)  # warm-up: opens the readers (under the timers), codecs
        timers.seconds.clear()
        timers.calls.clear()
        start = time.perf_counter()
        for k in range(1, batches + 1):
            read_batch.map(k)
        total = time.perf_counter() - start
    loader.close()
    known = sum(timers.seconds[s] for s in STAGES if s != "other")
    timers.seconds["other"] = total - known
    per_batch = {s: timers.seconds[s] / batches for s in STAGES}
    return {
        "batches": batches,
        "batch_size": batch_size,
        "ms_per_batch": {s: 1000 * v for s, v in per_batch.items()},
        "share": {s: v / (total / batches) for s, v in per_batch.items()},
        "calls_per_batch": {s: timers.calls[s] / batches for s in STAGES if s != "other"},
        "total_ms_per_batch": 1000 * total / batches,
        "samples_per_s_one_thread": batch_size * batches / total,
    }


DEVICE_STAGES = ("build_mp4", "decoder_create", "decode")


def device_breakdown(
    path: Path, batch_size: int, batches: int, decode_device: str, seed: int = 0
) -> dict:
    """What the devices' decode path costs per batch and per call, in this process: the
    loader with `decode_device` ("cuda"; "device" on CPU devices), no worker process, its
    decode threads' time in building each camera group's mp4, creating a torchcodec
    decoder (torchcodec's NVDEC cache may reuse the hardware decoder under it) and decoding,
    summed over the threads; and the batch's wall time."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxload.options import PipelineOptions
    from jaxload.pipeline.make_loader import make_loader
    from jaxload.tools import bench

    # The devices decode the rows they hold: batches sharded over every device.
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    timers = Timers()
    with instrumented(timers):
        loader = make_loader(
            path,
            global_batch_size=batch_size,
            seed=seed,
            delta_timestamps=bench.bench_windows(path),
            options=PipelineOptions(num_workers=0, decode_device=decode_device),
            sharding=sharding,
            host_index=0,
            host_count=1,
        )
        for _ in range(3):  # warm-up: readers, decoders, the jitted transfer
            next(loader)
        timers.seconds.clear()
        timers.calls.clear()
        start = time.perf_counter()
        for _ in range(batches):
            next(loader)
        total = time.perf_counter() - start
        loader.close()
    return {
        "decode_device": decode_device,
        "batches": batches,
        "batch_size": batch_size,
        "wall_ms_per_batch": 1000 * total / batches,
        "thread_ms_per_batch": {s: 1000 * timers.seconds[s] / batches for s in DEVICE_STAGES},
        "ms_per_call": {
            s: 1000 * timers.seconds[s] / max(timers.calls[s], 1) for s in DEVICE_STAGES
        },
        "decoders_created_per_1000_batches": 1000 * timers.calls["decoder_create"] / batches,
        "samples_per_s": batch_size * batches / total,
    }


def format_device(label: str, r: dict) -> str:
    lines = [
        f"{label}: decode_device={r['decode_device']!r}, {r['samples_per_s']:.0f} samples/s, "
        f"{r['wall_ms_per_batch']:.1f} ms per batch of {r['batch_size']} (wall)"
    ]
    for stage in DEVICE_STAGES:
        lines.append(
            f"  {stage:<15} {r['thread_ms_per_batch'][stage]:>8.1f} ms per batch (threads), "
            f"{r['ms_per_call'][stage]:>7.2f} ms per call"
        )
    lines.append(
        f"  torchcodec decoders created per 1,000 batches: "
        f"{r['decoders_created_per_1000_batches']:,.0f}"
    )
    return "\n".join(lines)


class ConstantBatch:
    """A Grain map returning the same batch for every index (picklable): arrays of 64 KiB
    or more are copied into a shared-memory slot first, as the loader's workers build
    camera arrays."""

    def __init__(self, batch: dict[str, np.ndarray]):
        self.batch = batch

    def __call__(self, _: int) -> dict[str, Any]:
        from jaxload.stages.shared_memory_output import MIN_SHM_BYTES
        from jaxload.workers import shared_batch

        out: dict[str, Any] = {}
        for key, value in self.batch.items():
            if value.nbytes >= MIN_SHM_BYTES:
                array, out[key] = shared_batch.worker_pool().array(value.shape, value.dtype)
                array[...] = value
            else:
                out[key] = value
        return out


def ipc_rate(batch: dict[str, np.ndarray], num_workers: int, seconds: float) -> dict:
    """Batches/s that Grain's mp_prefetch moves to this process (plain views) with no other
    work: the loader's transport (shared-memory slots for the large arrays)."""
    import grain

    from jaxload.stages.open_slots import OpenSlots
    from jaxload.stages.shared_memory_output import MIN_SHM_BYTES
    from jaxload.tools.bench import measure_iterator

    def make() -> Iterator[Any]:
        ds = grain.MapDataset.range(10**9).map(ConstantBatch(batch))
        it = ds.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))
        options = grain.experimental.DatasetOptions(min_shm_size=MIN_SHM_BYTES)
        it = (
            grain.experimental.WithOptionsIterDataset(it, options)
            .mp_prefetch(
                grain.MultiprocessingOptions(num_workers=num_workers, per_worker_buffer_size=2)
            )
            .map(OpenSlots())
        )
        return iter(it)

    timing = measure_iterator(
        make,
        seconds=seconds,
        warmup_s=2.0,
        warmup_batches=20,
        batch_len=lambda b: 1,
    )
    nbytes = sum(v.nbytes for v in batch.values())
    return {
        "batch_bytes": nbytes,
        "batches_per_s": timing.samples / timing.seconds,
        "ms_per_batch": 1000 * timing.seconds / timing.samples,
        "cpu_ms_per_batch_all_processes": 1000 * (timing.cpu_seconds or 0) / timing.samples,
        "cpu_ms_per_batch_main_process": 1000 * (timing.cpu_main_seconds or 0) / timing.samples,
    }


def profile(path: Path, args: argparse.Namespace) -> dict:
    from jaxload.tools import bench

    print(f"profiling {path.name}", flush=True)
    stages = stage_breakdown(path, args.batch_size, args.batches)
    import jaxload

    ds = jaxload.open(path, delta_timestamps=bench.bench_windows(path))
    from jaxload.batch.schema import BatchSchema

    samples = ds.__getitems__(list(range(args.batch_size)))
    batch = BatchSchema([ds.element_spec()]).collate(samples, np.zeros(args.batch_size, int))
    ipc = bench.in_fresh_process(ipc_rate, batch, args.workers, args.seconds)
    loader, _ = bench.in_fresh_process(
        bench.measure_jaxload,
        path,
        num_workers=args.workers,
        batch_size=args.batch_size,
        seconds=args.seconds,
        warmup_s=3.0,
    )
    return {"dataset": str(path), "stages": stages, "ipc": ipc, "loader": loader.to_json()}


def format_profile(label: str, r: dict) -> str:
    s, ipc, loader = r["stages"], r["ipc"], r["loader"]
    lines = [f"{label}: one worker's work per batch of {s['batch_size']} (one thread)"]
    for stage in STAGES:
        lines.append(
            f"  {stage:<17} {s['ms_per_batch'][stage]:>8.1f} ms  {100 * s['share'][stage]:>5.1f}%"
        )
    lines.append(
        f"  {'total':<17} {s['total_ms_per_batch']:>8.1f} ms  "
        f"({s['samples_per_s_one_thread']:.0f} samples/s on one thread)"
    )
    lines.append(
        f"  IPC only ({ipc['batch_bytes'] / 2**20:.1f} MB batches): {ipc['batches_per_s']:.1f} "
        f"batches/s, CPU {ipc['cpu_ms_per_batch_all_processes']:.1f} ms/batch "
        f"(main process {ipc['cpu_ms_per_batch_main_process']:.1f} ms)"
    )
    main_cpu = loader["details"].get("main_process_cpu_ms_per_sample") or 0
    lines.append(
        f"  loader: {loader['samples_per_s']:.0f} samples/s, CPU "
        f"{loader['cpu_ms_per_sample']:.2f} ms/sample of which main process {main_cpu:.2f}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_profile.json"
    )
    parser.add_argument("--only", choices=["small", "large"], action="append")
    parser.add_argument("--quick", action="store_true", help="the tiny datasets of run.py --quick")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=30, help="batches timed per stage run")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--decode-device",
        choices=["cuda", "device"],
        help="profile the devices' decode path instead ('device': CPU devices, a dry run)",
    )
    parser.add_argument(
        "--dataset",
        type=Path,
        help="profile this converted dataset (e.g. one carried to a GPU host) instead",
    )
    args = parser.parse_args(argv)
    from jaxload.tools import bench

    if args.dataset is not None:
        paths = {args.dataset.name: args.dataset}
    else:
        # The devices' path reads H.264 (NVDEC on A100/H100/H200 decodes no AV1), as bench_gpu.
        codec = {"video_codec": "h264"} if args.decode_device else {}
        specs = specs_for(args.quick, args.only)
        paths = {
            k: bench_data.prepare(s, args.cache, workers=2, **codec)[1] for k, s in specs.items()
        }
    results = {}
    for label, path in paths.items():
        if args.decode_device:
            results[label] = device_breakdown(
                path, args.batch_size, args.batches, args.decode_device
            )
            print(format_device(label, results[label]), flush=True)
        else:
            results[label] = profile(path, args)
            print(format_profile(label, results[label]), flush=True)
    doc = {
        "command": "python benchmarks/profile_loader.py " + " ".join(argv or sys.argv[1:]),
        "machine": bench.machine_info(),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
