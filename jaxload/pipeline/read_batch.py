"""The per-batch read: batch number -> this host's rows of that global batch, collated.

Runs in the Grain workers (or the training process's read threads): locates each row's
dataset and position in the sample stream, reads samples and compressed video, decodes
the cameras of the batch together (`jaxload.decode.frames.decode_grouped`) unless the
training process decodes them on its devices, and applies the batch transforms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grain
import numpy as np

from jaxload.decode.frames import EncodedFrames, decode_grouped
from jaxload.decode.on_device import merge_encoded
from jaxload.pipeline import shared_batch
from jaxload.pipeline.batch_schema import BatchSchema, rename_key
from jaxload.sampling.stream import SampleStream

Batch = dict[str, Any]


def read_samples(ds: Any, positions: np.ndarray) -> list[dict]:
    """Samples at dataset positions, with one batched read where the dataset offers it."""
    positions = [int(p) for p in positions]
    if hasattr(ds, "__getitems__"):
        return list(ds.__getitems__(positions))
    return [ds[p] for p in positions]


class ReadBatch(grain.transforms.Map):
    """Batch number -> this host's rows of that global batch, collated (runs in workers).

    A camera's batch array is torchcodec's output itself, frames already in (sample, slot)
    order. In a Grain worker (`enable_shared_memory_output`, called by Grain) it is copied
    once into one of the worker's reused shared-memory slots, which reaches the training
    process without another copy (`jaxload.pipeline.shared_batch`).
    """

    def __init__(
        self,
        datasets: Sequence[Any],
        stream: SampleStream,
        schema: BatchSchema,
        rows: np.ndarray,
        *,
        start: int,
        global_batch_size: int,
        transforms: Sequence[Callable[[Batch], Batch]] = (),
        encoded: Sequence[str] = (),
    ):
        self.datasets, self.stream, self.schema = list(datasets), stream, schema
        self.rows, self.start, self.global_batch_size = rows, int(start), int(global_batch_size)
        self.transforms = tuple(transforms)  # batch -> batch, in order (the transform seam)
        self.encoded = tuple(encoded)  # camera keys the training process decodes
        self.output_to_shared_memory = False

    def positions(self, k: int) -> np.ndarray:
        """Global stream positions of this host's rows of batch k."""
        return self.start + int(k) * self.global_batch_size + self.rows

    def map(self, k: int) -> Batch:
        if not self.output_to_shared_memory:
            return self._read(k, None)
        # id -> (array, its slot); holding the arrays keeps their ids unique meanwhile
        slots: dict[int, tuple[np.ndarray, shared_batch.SlotRef]] = {}
        try:
            batch = self._read(k, slots)
            # What leaves the worker is a reference to the slot, not the array; slots whose
            # array is not in the batch (replaced by the batch transform) are given back.
            for key, value in batch.items():
                made = slots.pop(id(value), None)
                if made is not None:
                    batch[key] = made[1]
            return batch
        finally:
            for _, ref in slots.values():
                shared_batch.worker_pool().release(ref)

    def _read(self, k: int, slots: dict | None) -> Batch:
        dataset_ids, ds_positions = self.stream.locate(self.positions(k))
        n = len(dataset_ids)
        samples: list[dict | None] = [None] * n
        videos: dict[str, list[tuple[np.ndarray, EncodedFrames]]] = {}
        for d in np.unique(dataset_ids):
            where = np.flatnonzero(dataset_ids == d)
            if hasattr(self.datasets[d], "read_encoded"):
                got, encoded = self.datasets[d].read_encoded(ds_positions[where].tolist())
                for raw_key, video in encoded.items():
                    key = rename_key(raw_key, self.schema.key_maps[d])
                    videos.setdefault(key, []).append((where, video))
            else:
                got = read_samples(self.datasets[d], ds_positions[where])
            for i, sample in zip(where, got, strict=True):
                samples[i] = sample
        to_decode = [
            (cam, where, video)
            for cam, parts in videos.items()
            if cam not in self.encoded
            for where, video in parts
        ]
        frames: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for (cam, where, _), part in zip(to_decode, decode_grouped([v for *_, v in to_decode])):
            frames.setdefault(cam, []).append((where, part))
        decoded = {cam: self._assemble(cam, parts, n, slots) for cam, parts in frames.items()}
        batch = self.schema.collate(samples, dataset_ids, exclude=self.encoded, arrays=decoded)
        for cam in self.encoded:
            batch[cam] = merge_encoded(videos[cam], n)
        for transform in self.transforms:
            batch = transform(batch)
        return batch

    def _assemble(
        self,
        cam: str,
        parts: list[tuple[np.ndarray, np.ndarray]],
        n: int,
        slots: dict | None,
    ) -> np.ndarray:
        """The camera's (n, *shape) array from its decoded parts (rows, frames); rows no
        part covers hold the field's fill value.

        In a worker (`slots` given) it is built in a shared-memory slot, recorded in
        `slots`."""
        field = self.schema.fields[cam]
        one_dataset = len(parts) == 1 and len(parts[0][0]) == n  # every row, in order
        if slots is None and one_dataset:
            return parts[0][1].reshape(n, *field.shape)  # torchcodec's output as is
        if slots is None:
            out = np.empty((n, *field.shape), field.dtype)
        else:
            out, ref = shared_batch.worker_pool().array((n, *field.shape), field.dtype)
            slots[id(out)] = (out, ref)
        covered = np.zeros(n, bool)
        for where, part in parts:
            out[where] = part.reshape(len(where), *field.shape)
            covered[where] = True
        out[~covered] = field.fill
        return out
