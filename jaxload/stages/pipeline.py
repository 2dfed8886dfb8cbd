"""The Grain pipeline of the per-batch stages (`build_pipeline`), one stage per module
of jaxload.stages (read_batch, shared_memory_output, watch_readers, open_slots,
to_global)::

    MapDataset.range(batches left)            batch number k, relative to the restored position
      .map(ReadBatch)                         positions -> samples + video decoded into one dict
      .to_iter_dataset(ReadOptions)           read threads in each worker
    SharedMemoryOutput                        workers build camera arrays in reused shared memory
      .mp_prefetch(MultiprocessingOptions)    worker processes, deterministic round robin;
                                              each exits when the training process dies
    WatchReaders                              a reader silent past worker_timeout_s: an error
      .map(OpenSlots)                         zero-copy views of those arrays
      .map(ToGlobalArrays)                    numpy -> global jax.Array (only with `sharding`);
                                              decode_device="cuda": each device decodes its rows;
                                              image transforms on the devices run here
      ThreadPrefetchIterDataset               background thread: the trainer never waits on Python
"""

from __future__ import annotations

import sys

import grain

from jaxload.stages.open_slots import OpenSlots
from jaxload.stages.read_batch import ReadBatch
from jaxload.stages.shared_memory_output import MIN_SHM_BYTES, SharedMemoryOutput
from jaxload.stages.to_global import ToGlobalArrays
from jaxload.stages.watch_readers import WatchReaders
from jaxload.workers.processes import WorkerRegistry


def build_pipeline(
    read_batch: ReadBatch,
    count: int | None,
    to_global: ToGlobalArrays | None,
    workers: WorkerRegistry | None,
) -> grain.IterDataset:
    """The Grain pipeline of `count` batches (None: forever) read by `read_batch`, run as
    its spec's options say; `workers` (with worker processes) learns who they are."""
    options = read_batch.spec.options
    ds = grain.MapDataset.range(sys.maxsize if count is None else count).map(read_batch)
    it = ds.to_iter_dataset(
        grain.ReadOptions(
            num_threads=options.read_threads,
            prefetch_buffer_size=max(1, 2 * options.read_threads),
        )
    )
    if options.num_workers > 0:
        if workers is None:
            raise ValueError("worker processes need a WorkerRegistry")
        # Small arrays travel pickled: a shared-memory segment per array (Grain's
        # default) costs more syscalls than copying a few KB.
        it = grain.experimental.WithOptionsIterDataset(
            it, grain.experimental.DatasetOptions(min_shm_size=MIN_SHM_BYTES)
        )
        it = SharedMemoryOutput(it, read_batch).mp_prefetch(
            grain.MultiprocessingOptions(
                num_workers=options.num_workers,
                per_worker_buffer_size=options.worker_buffer_size,
            ),
            worker_init_fn=workers.hooks(),
        )
    it = WatchReaders(
        it, options.worker_timeout_s, read_batch.describe, workers, options.num_workers
    )
    if options.num_workers > 0:
        it = it.map(OpenSlots())
    if to_global is not None:
        it = it.map(to_global)
    return grain.experimental.ThreadPrefetchIterDataset(it, prefetch_buffer_size=options.prefetch)
