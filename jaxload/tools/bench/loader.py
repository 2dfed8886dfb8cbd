"""jaxload's loader, measured: samples/s, time to first batch, CPU per sample, peak RSS.

Its peer for the reference pipeline is `jaxload.tools.bench.lerobot.measure_lerobot`; both
are measured by `jaxload.tools.bench.measure`.

Example:
    >>> result, served = measure_jaxload("out/ds", delta_timestamps=bench_windows("out/ds"))
    >>> print(f"{result.samples_per_s:.0f} samples/s, first batch {result.time_to_first_batch_s:.1f} s")
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.tools.bench.measure import RssSampler, Throughput, measure_iterator, throughput
from jaxload.tools.bench.windows import bench_windows, frames_per_sample


def measure_jaxload(
    path: str | os.PathLike,
    *,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    num_workers: int | None = 2,
    batch_size: int = 32,
    seconds: float = 20.0,
    warmup_s: float = 5.0,
    seed: int = 0,
    loader_kwargs: Mapping[str, Any] | None = None,
) -> tuple[Throughput, list[np.ndarray]]:
    """jaxload's loader on `path`: steady-state throughput, time to first batch, peak RSS.

    `num_workers=None` measures the loader's own choice for this machine
    (`jaxload.options.split_cores`: worker processes and read threads).

    Returns the result and, per counted batch, the dataset positions it served (what
    `jaxload.tools.bench.limit.decode_limit` replays).

    Example:
        >>> result, served = measure_jaxload("out/ds", delta_timestamps=bench_windows("out/ds"))
        >>> print(f"{result.samples_per_s:.0f} samples/s, first batch {result.time_to_first_batch_s:.1f} s")
    """
    import jaxload
    from jaxload.options import PipelineOptions, split_cores
    from jaxload.pipeline.make_loader import make_loader

    windows = dict(delta_timestamps) if delta_timestamps is not None else bench_windows(path)
    ds = jaxload.open(path)  # metadata only: frames per sample, index -> position
    per_sample = frames_per_sample(windows, ds.camera_keys)
    read_threads = 2
    if num_workers is None:
        num_workers, read_threads = split_cores(os.cpu_count() or 2)
    kwargs = {
        "read_threads": read_threads,
        "worker_buffer_size": 2,
        "prefetch": 2,
        **(loader_kwargs or {}),
    }
    buffered = num_workers * (kwargs["worker_buffer_size"] + 2 * kwargs["read_threads"])
    warmup_batches = buffered + kwargs["prefetch"] + 2
    served: list[np.ndarray] = []
    loaders = []

    def make() -> Iterator[Any]:
        loader = make_loader(
            path,
            global_batch_size=batch_size,
            seed=seed,
            delta_timestamps=windows,
            host_index=0,
            host_count=1,
            options=PipelineOptions(num_workers=num_workers, **kwargs),
        )
        loaders.append(loader)
        return loader

    def record(batch: Mapping[str, np.ndarray]) -> None:
        served.append(positions_of(ds, batch["episode_index"], batch["frame_index"]))

    with RssSampler() as rss:
        try:
            timing = measure_iterator(
                make,
                seconds=seconds,
                warmup_s=warmup_s,
                warmup_batches=warmup_batches,
                batch_len=lambda b: len(b["index"]),
                on_batch=record,
            )
        finally:
            for loader in loaders:
                loader.close()
    result = throughput("jaxload", timing, per_sample, batch_size, num_workers, rss)
    result.details["loader_kwargs"] = kwargs
    return result, served


def positions_of(ds: Any, episode_index: np.ndarray, frame_index: np.ndarray) -> np.ndarray:
    """Dataset positions of (episode_index, frame_index) pairs of a jaxload dataset."""
    episode_index = np.asarray(episode_index, dtype=np.int64).reshape(-1)
    row = np.searchsorted(ds.episode_index, episode_index)
    return ds.episode_starts[row] + np.asarray(frame_index, dtype=np.int64).reshape(-1)
