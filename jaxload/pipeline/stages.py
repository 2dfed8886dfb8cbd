"""The Grain stages around the per-batch read (jaxload.pipeline.read_batch), and the
pipeline they make (`build_pipeline`)::

    MapDataset.range(batches left)            batch number k, relative to the restored position
      .map(ReadBatch)                         positions -> samples + video decoded into one dict
      .to_iter_dataset(ReadOptions)           read threads in each worker
    SharedMemoryOutput                        workers build camera arrays in reused shared memory
      .mp_prefetch(MultiprocessingOptions)    worker processes, deterministic round robin
      .map(OpenSlots)                         zero-copy views of those arrays
      .map(ToGlobalArrays)                    numpy -> global jax.Array (only with `sharding`);
                                              decode_device="cuda": each device decodes its rows
      ThreadPrefetchIterDataset               background thread: the trainer never waits on Python
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import grain
import numpy as np

from jaxload.decode.frames import EncodedFrames
from jaxload.decode.on_device import decode_to_global
from jaxload.pipeline import hosts, shared_batch
from jaxload.pipeline.options import PipelineOptions
from jaxload.pipeline.read_batch import Batch, ReadBatch

# Arrays smaller than this go from workers to the trainer pickled, larger ones through
# shared memory (camera arrays are built there directly, whatever their size).
MIN_SHM_BYTES = 1 << 16


class SharedMemoryOutput(grain.IterDataset):
    """Passes its parent through; tells ReadBatch to build batches in shared memory.

    Grain calls `enable_shared_memory_output` on the dataset given to `mp_prefetch` in the
    workers; ReadBatch then builds camera arrays in shared-memory slots and sends their
    references (`jaxload.pipeline.shared_batch`), which `OpenSlots` opens in the training process.
    """

    def __init__(self, parent: grain.IterDataset, read_batch: ReadBatch):
        super().__init__(parent)
        self.read_batch = read_batch

    def __iter__(self) -> grain.DatasetIterator:
        return self._parent.__iter__()

    def enable_shared_memory_output(self) -> None:
        self.read_batch.output_to_shared_memory = True


class OpenSlots(grain.transforms.Map):
    """Batches from the workers as plain ndarrays, without copies: camera arrays from their
    shared-memory slots (`jaxload.pipeline.shared_batch`), other large arrays from Grain's
    shared memory (Grain unlinks those once the last view is gone)."""

    def __init__(self) -> None:
        self.opener = shared_batch.SlotOpener()

    def map(self, batch: Batch) -> Batch:
        out = {}
        for key, value in batch.items():
            if isinstance(value, shared_batch.SlotRef):
                value = self.opener.open(value)
            elif isinstance(value, np.ndarray):
                value = value.view(np.ndarray)
            out[key] = value
        return out


class ToGlobalArrays(grain.transforms.Map):
    """Host-local batch -> global jax.Arrays over `sharding` (strings stay numpy).

    Cameras left encoded by the workers (decode_device="cuda") are decoded here, each
    device decoding the rows it holds; `rows` are this host's global rows.
    """

    def __init__(
        self,
        sharding: Any,
        global_batch_size: int,
        rows: np.ndarray,
        sample_shapes: Mapping[str, tuple[int, ...]],
    ):
        self.sharding, self.global_batch_size = sharding, int(global_batch_size)
        self.rows, self.sample_shapes = rows, dict(sample_shapes)
        self._by_rank: dict[int, Any] = {}

    def _sharding(self, ndim: int) -> Any:
        if ndim not in self._by_rank:
            self._by_rank[ndim] = hosts.sharding_for_rank(self.sharding, ndim)
        return self._by_rank[ndim]

    def map(self, batch: Batch) -> Batch:
        import jax

        encoded = {k: v for k, v in batch.items() if isinstance(v, EncodedFrames)}
        out = {}
        if encoded:
            shapes = {k: self.sample_shapes[k] for k in encoded}
            out = decode_to_global(
                encoded, shapes, self._sharding, self.rows, self.global_batch_size
            )
        for key, value in batch.items():
            if key in encoded:
                continue
            if value.dtype.kind in "USO":
                out[key] = value
            else:
                global_shape = (self.global_batch_size, *value.shape[1:])
                out[key] = jax.make_array_from_process_local_data(
                    self._sharding(value.ndim), value, global_shape
                )
        return {k: out[k] for k in batch}


def build_pipeline(
    read_batch: ReadBatch,
    count: int | None,
    options: PipelineOptions,
    to_global: ToGlobalArrays | None,
) -> grain.IterDataset:
    """The Grain pipeline of `count` batches (None: forever) read by `read_batch`."""
    ds = grain.MapDataset.range(sys.maxsize if count is None else count).map(read_batch)
    it = ds.to_iter_dataset(
        grain.ReadOptions(
            num_threads=options.read_threads,
            prefetch_buffer_size=max(1, 2 * options.read_threads),
        )
    )
    if options.num_workers > 0:
        # Small arrays travel pickled: a shared-memory segment per array (Grain's
        # default) costs more syscalls than copying a few KB.
        it = grain.experimental.WithOptionsIterDataset(
            it, grain.experimental.DatasetOptions(min_shm_size=MIN_SHM_BYTES)
        )
        it = (
            SharedMemoryOutput(it, read_batch)
            .mp_prefetch(
                grain.MultiprocessingOptions(
                    num_workers=options.num_workers,
                    per_worker_buffer_size=options.worker_buffer_size,
                )
            )
            .map(OpenSlots())
        )
    if to_global is not None:
        it = it.map(to_global)
    return grain.experimental.ThreadPrefetchIterDataset(it, prefetch_buffer_size=options.prefetch)
