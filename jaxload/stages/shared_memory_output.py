"""The workers' output in shared memory: `SharedMemoryOutput` tells ReadBatch to build
camera arrays in reused shared-memory slots (`jaxload.workers.shared_batch`); other arrays
of at least MIN_SHM_BYTES travel through Grain's shared memory. `OpenSlots`
(jaxload.stages.open_slots) opens both in the training process."""

from __future__ import annotations

import grain

from jaxload.stages.read_batch import ReadBatch

# Arrays smaller than this go from workers to the trainer pickled, larger ones through
# shared memory (camera arrays are built there directly, whatever their size).
MIN_SHM_BYTES = 1 << 16


class SharedMemoryOutput(grain.IterDataset):
    """Passes its parent through; tells ReadBatch to build batches in shared memory.

    Grain calls `enable_shared_memory_output` on the dataset given to `mp_prefetch` in the
    workers; ReadBatch then builds camera arrays in shared-memory slots and sends their
    references (`jaxload.workers.shared_batch`), which `OpenSlots` opens in the training process.
    """

    def __init__(self, parent: grain.IterDataset, read_batch: ReadBatch):
        super().__init__(parent)
        self.upstream, self.read_batch = parent, read_batch

    def __iter__(self) -> grain.DatasetIterator:
        return self.upstream.__iter__()

    def enable_shared_memory_output(self) -> None:
        self.read_batch.output_to_shared_memory = True
