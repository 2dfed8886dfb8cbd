"""The per-batch read: batch number -> this host's rows of that global batch, collated.

Runs in the Grain workers (or the training process's read threads): locates each row's
dataset and position in the sample stream, reads samples and compressed video, decodes
the cameras of the batch together (`jaxload.decode.frames.decode_grouped`) unless the
training process decodes them on its devices, applies the image transforms (when they run
on CPU), then the batch transforms, and keeps the keys a batch holds
(`jaxload.batch.keys`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import grain
import numpy as np

from jaxload.batch.schema import rename_key
from jaxload.decode.frames import EncodedFrames, decode_grouped
from jaxload.decode.on_device import merge_encoded
from jaxload.episode_dataset import OpenedDatasets, ReadHints
from jaxload.errors import BatchTransformError
from jaxload.placement.transforms import transform_rows
from jaxload.resolution.spec import LoaderSpec
from jaxload.storage.prefetch import BatchReads, Lookahead
from jaxload.transforms.on_device import POSITIONS_KEY
from jaxload.workers import shared_batch
from jaxload.workers.processes import raise_if_pipeline_closed
from jaxload.workers.read_threads import DaemonReads

Batch = dict[str, Any]


def check_transformed(batch: Any, transform: Callable, rows: int) -> Batch:
    """`batch` if it is one (a dict of arrays with `rows` on the first axis), else a
    BatchTransformError naming the transform and what is wrong.

    Grain drops a map's None as filtered out: without this check a transform returning None
    makes next() spin forever, and anything else fails far from its cause."""
    name = getattr(transform, "__qualname__", None) or type(transform).__name__
    rule = (
        "it must return the batch: a dict of numpy arrays whose first axis has this host's "
        f"{rows} rows"
    )
    if not isinstance(batch, Mapping):
        raise BatchTransformError(f"batch_transform {name} returned {type(batch).__name__}; {rule}")
    for key, value in batch.items():
        if not isinstance(key, str):
            raise BatchTransformError(f"batch_transform {name} returned key {key!r}; keys are str")
        if isinstance(value, EncodedFrames):
            continue  # a camera decoded later on the devices (decode_device="cuda")
        shape = getattr(value, "shape", None)
        if not isinstance(value, np.ndarray) or not shape or shape[0] != rows:
            what = f"shape {shape}" if isinstance(value, np.ndarray) else type(value).__name__
            raise BatchTransformError(f"batch_transform {name} returned {key!r} as {what}; {rule}")
    return dict(batch)


def _new_array(shape: tuple[int, ...], dtype: Any, slots: dict | None) -> np.ndarray:
    """An uninitialised array: in a worker (`slots` given) in one of its reused
    shared-memory slots, recorded in `slots`."""
    if slots is None:
        return np.empty(shape, dtype)
    out, ref = shared_batch.worker_pool().array(shape, dtype)
    slots[id(out)] = (out, ref)
    return out


def packed_gops(value: EncodedFrames, pool: shared_batch.SlotPool) -> EncodedFrames:
    """The compressed frames with their GOPs in a shared-memory slot (a worker's output;
    `unpacked_gops` in the training process undoes it)."""
    return dataclasses.replace(value, gops=shared_batch.pack_bytes(value.gops, pool))


def unpacked_gops(value: Any, opener: shared_batch.SlotOpener) -> Any:
    """`packed_gops` undone: the GOPs as views of their slot."""
    if isinstance(value, EncodedFrames) and isinstance(value.gops, shared_batch.PackedBytes):
        return dataclasses.replace(value, gops=opener.open_bytes(value.gops))
    return value


class ReadBatch(grain.transforms.Map):
    """Batch number -> this host's rows of that global batch, collated (runs in workers).

    Reads what its `LoaderSpec` says from global position `start` on. A camera's batch
    array is torchcodec's output itself, frames already in (sample, slot) order. In a
    Grain worker (`enable_shared_memory_output`, called by Grain) it is copied once into
    one of the worker's reused shared-memory slots, which reaches the training process
    without another copy (`jaxload.workers.shared_batch`). When a dataset is remote, a
    `jaxload.storage.prefetch.Lookahead` plans and fetches ahead of each batch.
    """

    def __init__(self, spec: LoaderSpec, datasets: OpenedDatasets, start: int):
        self.spec, self.datasets, self.start = spec, datasets, int(start)
        step = max(1, spec.options.num_workers)
        self.lookahead = Lookahead(spec, datasets, step=step) if datasets.stores else None
        self.output_to_shared_memory = False
        self.reads = DaemonReads()  # a stuck read never holds up exit (read_threads)

    def positions(self, k: int) -> np.ndarray:
        """Global stream positions of this host's rows of batch k."""
        return self.spec.positions(self.start, k)

    def describe(self, k: int) -> str:
        """What batch k reads, for error messages (`LoaderSpec.describe`)."""
        return self.spec.describe(self.start, k)

    def map(self, k: int) -> Batch:
        raise_if_pipeline_closed()  # in a worker of a closed loader: nobody wants batch k
        return self.reads.run(self._map, k)

    def _map(self, k: int) -> Batch:
        reads = self.lookahead.before(int(k), self.positions) if self.lookahead else None
        if not self.output_to_shared_memory:
            return self._read(k, reads, None)
        # id -> (array, its slot); holding the arrays keeps their ids unique meanwhile
        slots: dict[int, tuple[np.ndarray, shared_batch.SlotRef]] = {}
        try:
            batch = self._read(k, reads, slots)
            # What leaves the worker is a reference to the slot, not the array; slots whose
            # array is not in the batch (replaced by the batch transform) are given back.
            for key, value in batch.items():
                made = slots.pop(id(value), None)
                if made is not None:
                    batch[key] = made[1]
                elif isinstance(value, EncodedFrames):
                    batch[key] = packed_gops(value, shared_batch.worker_pool())
            return batch
        finally:
            for _, ref in slots.values():
                shared_batch.worker_pool().release(ref)

    def _read(self, k: int, reads: BatchReads | None, slots: dict | None) -> Batch:
        spec, placement = self.spec, self.spec.placement
        located = reads.located if reads is not None else None
        dataset_ids, ds_positions = located or spec.stream.locate(self.positions(k))
        n = len(dataset_ids)
        samples: list[dict | None] = [None] * n
        videos: dict[str, list[tuple[np.ndarray, EncodedFrames]]] = {}
        # camera (batch key) -> its parts: (dataset, rows, frames of those rows)
        frames: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {}
        to_decode: list[tuple[str, int, np.ndarray, EncodedFrames]] = []
        for d in np.unique(dataset_ids).tolist():
            where = np.flatnonzero(dataset_ids == d)
            dataset, key_map = self.datasets[d], spec.schema.key_maps[d]
            hints = None  # what the lookahead made for this read (remote datasets)
            if reads is not None:
                hints = ReadHints(reads.plans.get(d), reads.contexts.get(d))
            got, cameras = dataset.read(ds_positions[where].tolist(), hints)
            for raw_key, value in cameras.items():
                key = rename_key(raw_key, key_map)
                if key is None:  # left out of the batch: never decoded
                    continue
                if not isinstance(value, EncodedFrames):  # decoded by the dataset itself
                    frames.setdefault(key, []).append((d, where, value))
                    continue
                videos.setdefault(key, []).append((where, value))
                if key not in placement.encoded:
                    to_decode.append((key, d, where, value))
            for i, sample in zip(where, got, strict=True):
                samples[i] = sample
        decoded_parts = decode_grouped([video for *_, video in to_decode])
        for (cam, d, where, _), part in zip(to_decode, decoded_parts, strict=True):
            frames.setdefault(cam, []).append((d, where, part))
        positions = self.positions(k)
        decoded = {
            cam: self._assemble(cam, parts, n, slots, positions) for cam, parts in frames.items()
        }
        batch = spec.schema.collate(samples, dataset_ids, exclude=placement.encoded, arrays=decoded)
        batch.update({cam: merge_encoded(videos[cam], n) for cam in placement.encoded})
        for transform in spec.batch_transforms:
            batch = check_transformed(transform(batch), transform, n)
        batch = spec.keys.select(batch)
        if placement.transforms_on_devices is not None:  # the devices need the positions
            batch[POSITIONS_KEY] = self.positions(k)
        return batch

    def _assemble(
        self,
        cam: str,
        parts: list[tuple[int, np.ndarray, np.ndarray]],
        n: int,
        slots: dict | None,
        positions: np.ndarray,
    ) -> np.ndarray:
        """The camera's (n, *shape) array from its decoded parts (dataset, rows, frames),
        each through its dataset's image transforms and the loader's (those the readers
        run) first; rows no part covers hold the field's fill value.

        In a worker (`slots` given) it is built in a shared-memory slot, recorded in
        `slots`."""
        spec = self.spec
        field = spec.schema.fields[cam]
        loader = spec.placement.transforms_in_readers
        parts = [
            (
                d,
                where,
                transform_rows(
                    spec.placement.source_transforms[d]
                    if spec.placement.source_transforms
                    else None,
                    loader,
                    cam,
                    part.reshape(len(where), *part.shape[1:]),
                    positions[where],
                    spec.seed,
                ),
            )
            for d, where, part in parts
        ]
        one_dataset = len(parts) == 1 and len(parts[0][1]) == n  # every row, in order
        if slots is None and one_dataset:
            return parts[0][2].reshape(n, *field.shape)  # torchcodec's output as is
        out = _new_array((n, *field.shape), field.dtype, slots)
        covered = np.zeros(n, bool)
        for _, where, part in parts:
            out[where] = part.reshape(len(where), *field.shape)
            covered[where] = True
        out[~covered] = field.fill
        return out
