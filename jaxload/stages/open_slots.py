"""`OpenSlots`: the workers' batches opened in the training process as plain ndarrays,
without copies (what `SharedMemoryOutput`, jaxload.stages.shared_memory_output, sent)."""

from __future__ import annotations

import grain
import numpy as np

from jaxload.stages.read_batch import Batch, unpacked_gops
from jaxload.workers import shared_batch


class OpenSlots(grain.transforms.Map):
    """Batches from the workers as plain ndarrays, without copies: camera arrays from their
    shared-memory slots (`jaxload.workers.shared_batch`), other large arrays from Grain's
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
            else:  # compressed frames for the devices: GOPs in a slot
                value = unpacked_gops(value, self.opener)
            out[key] = value
        return out
