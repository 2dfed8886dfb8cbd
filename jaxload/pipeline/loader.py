"""`make_loader`: global batches from one or more jaxload datasets, on a Grain pipeline.

Pipeline (one element = this host's part of one global batch)::

    MapDataset.range(batches left)            batch number k, relative to the restored position
      .map(ReadBatch)                         positions -> samples + video decoded into one dict
      .to_iter_dataset(ReadOptions)           read threads in each worker
    SharedMemoryOutput                        workers build camera arrays in reused shared memory
      .mp_prefetch(MultiprocessingOptions)    worker processes, deterministic round robin
      .map(OpenSlots)                         zero-copy views of those arrays
      .map(ToGlobalArrays)                    numpy -> global jax.Array (only with `sharding`);
                                              decode_device="cuda": each device decodes its rows
      ThreadPrefetchIterDataset               background thread: the trainer never waits on Python

Batch k is global positions ``[k*G, (k+1)*G)`` of the sample stream (see
``jaxload.sampling.stream``); a batch's content depends on neither worker nor host count, so the
loader's state is the global position of the next batch (see ``jaxload.state``).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import math
import os
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from jaxload.pipeline import hosts, shared_batch
from jaxload.decode.on_device import decode_to_global, merge_encoded
from jaxload.sampling.mixture import DEFAULT_BLOCK_SIZE
from jaxload.pipeline.batch_schema import BatchSchema, rename_key
from jaxload.state import LoaderState, check_compatible, stream_fingerprint
from jaxload.sampling.stream import SampleStream
from jaxload.decode.frames import EncodedFrames, decode_grouped
from jaxload.pipeline.decode_device import DECODE_DEVICES, resolve_decode_device

Batch = dict[str, Any]
# Arrays smaller than this go from workers to the trainer pickled, larger ones through
# shared memory (camera arrays are built there directly, whatever their size).
MIN_SHM_BYTES = 1 << 16


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
        batch_transform: Callable[[Batch], Batch] | None = None,
        encoded: Sequence[str] = (),
    ):
        self.datasets, self.stream, self.schema = list(datasets), stream, schema
        self.rows, self.start, self.global_batch_size = rows, int(start), int(global_batch_size)
        self.batch_transform = batch_transform
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
        return self.batch_transform(batch) if self.batch_transform else batch

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


def _is_dataset(obj: Any) -> bool:
    return hasattr(obj, "episode_lengths") and hasattr(obj, "__getitem__")


def _open_all(
    paths_or_datasets: Any,
    delta_timestamps: Mapping[str, Sequence[float]] | Sequence[Mapping] | None,
    episodes: Any,
) -> tuple[list[Any], list[str]]:
    """Datasets (opened where given as paths) and a printable name for each."""
    items = (
        [paths_or_datasets]
        if isinstance(paths_or_datasets, str | os.PathLike) or _is_dataset(paths_or_datasets)
        else list(paths_or_datasets)
    )
    if not items:
        raise ValueError("make_loader needs at least one dataset")
    if any(_is_dataset(item) for item in items) and (delta_timestamps or episodes is not None):
        raise ValueError(
            "delta_timestamps/episodes apply when make_loader opens paths; pass them to "
            "jaxload.open for datasets you open yourself"
        )
    per_ep = _per_dataset(episodes, len(items), "episodes", sequence_is_shared=True)
    if isinstance(delta_timestamps, Mapping) and len(items) > 1:
        per_dt = _shared_windows(items, delta_timestamps, per_ep)
    else:
        per_dt = _per_dataset(delta_timestamps, len(items), "delta_timestamps")
    datasets = [
        item if _is_dataset(item) else _open(item, delta_timestamps=dt, episodes=ep)
        for item, dt, ep in zip(items, per_dt, per_ep, strict=True)
    ]
    names = [str(getattr(d, "path", type(d).__name__)) for d in datasets]
    return datasets, names


def _per_dataset(value: Any, n: int, name: str, *, sequence_is_shared: bool = False) -> list:
    """One value per dataset: a list of n values, or one value shared by all."""
    if value is None or isinstance(value, Mapping) or n == 1:
        return [value] * n
    if sequence_is_shared and not (len(value) and isinstance(value[0], Sequence | type(None))):
        return [value] * n
    if len(value) != n:
        raise ValueError(f"{name}: {len(value)} entries for {n} datasets")
    return list(value)


def _shared_windows(items: list, delta_timestamps: Mapping, episodes: list) -> list[dict | None]:
    """One delta_timestamps dict for a mixture: each dataset gets the keys it has."""
    from jaxload.errors import WindowError

    keys = [
        set(_open(p, episodes=ep).element_spec()) for p, ep in zip(items, episodes, strict=True)
    ]
    unknown = [k for k in delta_timestamps if not any(k in ks for ks in keys)]
    if unknown:
        raise WindowError(f"delta_timestamps keys {unknown} are in none of the datasets {items}")
    return [{k: v for k, v in delta_timestamps.items() if k in ks} or None for ks in keys]


def _open(path: Any, **kw: Any) -> Any:
    import jaxload.dataset

    return jaxload.dataset.open(path, **kw)


# Cores one reader process keeps busy. Its threads decode outside the GIL but hold it for
# ~30% of each batch at 96x128 (reads, windows, building the mp4, collation; ~7% at
# 480x640), so threads beyond ~3 per process mostly wait (benchmarks/profile_loader.py).
CORES_PER_PROCESS = 3
MAX_WORKERS = 8


def split_cores(cores: int) -> tuple[int, int]:
    """(num_workers, read_threads) that keep `cores` cores reading and decoding.

    Up to CORES_PER_PROCESS cores: threads in the training process, no worker processes
    (on 2 cores they served as many samples/s as 2 workers at 96x128 and 34-37% more at
    480x640: no shared-memory page faults, no pickling, and a first batch 1.2-1.5 s
    sooner, without workers importing torch). Beyond that,
    ceil(cores / CORES_PER_PROCESS) workers (at most MAX_WORKERS) sharing the cores as
    read threads.
    """
    cores = max(1, int(cores))
    if cores <= CORES_PER_PROCESS:
        return 0, max(2, cores)
    workers = min(MAX_WORKERS, math.ceil(cores / CORES_PER_PROCESS))
    return workers, math.ceil(cores / workers)


class Loader:
    """Iterator of global batches with exact, elastic `get_state`/`set_state`. See make_loader."""

    def __init__(
        self,
        datasets: Sequence[Any],
        names: Sequence[str],
        stream: SampleStream,
        schema: BatchSchema,
        *,
        global_batch_size: int,
        seed: int,
        shuffle: bool,
        drop_n_first_frames: int,
        drop_n_last_frames: int,
        num_epochs: int | None,
        rows: np.ndarray,
        host_count: int,
        sharding: Any,
        options: PipelineOptions,
        batch_transform: Callable[[Batch], Batch] | None,
        encoded: Sequence[str] = (),
    ):
        self.datasets, self.names, self.stream, self.schema = (
            list(datasets),
            list(names),
            stream,
            schema,
        )
        self.global_batch_size, self.seed, self.shuffle = global_batch_size, seed, shuffle
        self.drop_n_first_frames, self.drop_n_last_frames = drop_n_first_frames, drop_n_last_frames
        self.num_epochs, self.rows, self.host_count = num_epochs, rows, host_count
        self.sharding, self.options = sharding, options
        self.batch_transform, self.encoded = batch_transform, tuple(encoded)
        self.fingerprint = stream_fingerprint(
            [d.fingerprint for d in self.datasets],
            [d.episode_index for d in self.datasets],
            [d.episode_lengths for d in self.datasets],
        )
        self._start = 0  # global position of the first batch of the current pipeline
        self._delivered = 0  # batches handed out since _start
        self._iterator = None

    # -- iteration ---------------------------------------------------------------------------

    def __iter__(self) -> Loader:
        return self

    def start(self) -> Loader:
        """Start worker processes and prefetching now (otherwise the first next() does)."""
        if self._iterator is None:
            self._iterator = self.grain_dataset().__iter__()
            if self.options.num_workers > 0:
                _start_workers(self._iterator)
            self._iterator.start_prefetch()
            _RUNNING.add(self)
        return self

    def __next__(self) -> Batch:
        self.start()
        batch = next(self._iterator)
        self._delivered += 1
        return batch

    def close(self) -> None:
        """Stop the background thread and the worker processes (a later next() restarts them)."""
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None
        _RUNNING.discard(self)

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Bound at definition: at interpreter exit the module's globals may already be None.
    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        if not _finalizing():
            self.close()

    # -- position and size -------------------------------------------------------------------

    @property
    def position(self) -> int:
        """Global sample position of the next batch."""
        return self._start + self._delivered * self.global_batch_size

    @property
    def epoch(self) -> int:
        """Epoch of the next batch's first sample (mixtures: nominal epochs, see jaxload.sampling.stream)."""
        return self.position // self.stream.epoch_size

    @property
    def epoch_size(self) -> int:
        """Samples per epoch: the valid anchors (the sum over datasets in a mixture)."""
        return self.stream.epoch_size

    @property
    def num_batches(self) -> int | None:
        """Batches left from the current position; None when it repeats forever."""
        if self.num_epochs is None:
            return None
        return max(0, (self.num_epochs * self.epoch_size - self.position) // self.global_batch_size)

    @property
    def element_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape and dtype of every array key of a batch (global shape with `sharding`).

        Describes the collated batch, before any `batch_transform`.
        """
        rows = self.global_batch_size if self.sharding is not None else len(self.rows)
        return {
            k: ((rows, *shape), dtype) for k, (shape, dtype) in self.schema.element_spec.items()
        }

    # -- state -------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """The JSON-able state: restoring it makes the next batch this loader's next batch."""
        return self._state_at(self.position).to_dict()

    def set_state(
        self, state: Mapping[str, Any], *, allow_global_batch_size_change: bool = False
    ) -> None:
        """Continue from a saved state; the host count may differ from the one at save.

        Raises jaxload.errors.CheckpointError for another dataset, seed or sampling setup,
        or another global batch size unless `allow_global_batch_size_change`.
        """
        saved = LoaderState.from_dict(state)
        check_compatible(
            saved,
            self._state_at(saved.position),
            allow_global_batch_size_change=allow_global_batch_size_change,
        )
        self.close()
        self._start, self._delivered = saved.position, 0

    def _state_at(self, position: int) -> LoaderState:
        mixture = self.stream.mixture
        return LoaderState(
            position=int(position),
            epoch=int(position // self.stream.epoch_size),
            seed=self.seed,
            global_batch_size=self.global_batch_size,
            host_count=self.host_count,
            fingerprint=self.fingerprint,
            dataset_fingerprints=tuple(str(d.fingerprint) for d in self.datasets),
            shuffle=self.shuffle,
            drop_n_first_frames=self.drop_n_first_frames,
            drop_n_last_frames=self.drop_n_last_frames,
            mixture_quota=tuple(int(q) for q in mixture.quota) if mixture is not None else (),
            epoch_size=self.stream.epoch_size,
            sources=tuple(self.names),
        )

    # -- the Grain pipeline ------------------------------------------------------------------

    def read_batch(self) -> ReadBatch:
        """The per-batch read transform, anchored at the current position."""
        return ReadBatch(
            self.datasets,
            self.stream,
            self.schema,
            self.rows,
            start=self.position,
            global_batch_size=self.global_batch_size,
            batch_transform=self.batch_transform,
            encoded=self.encoded,
        )

    def grain_dataset(self) -> grain.IterDataset:
        """The Grain pipeline from the current position on (what `next` iterates)."""
        count = self.num_batches
        read_batch = self.read_batch()
        ds = grain.MapDataset.range(sys.maxsize if count is None else count).map(read_batch)
        o = self.options
        it = ds.to_iter_dataset(
            grain.ReadOptions(
                num_threads=o.read_threads, prefetch_buffer_size=max(1, 2 * o.read_threads)
            )
        )
        if o.num_workers > 0:
            # Small arrays travel pickled: a shared-memory segment per array (Grain's
            # default) costs more syscalls than copying a few KB.
            it = grain.experimental.WithOptionsIterDataset(
                it, grain.experimental.DatasetOptions(min_shm_size=MIN_SHM_BYTES)
            )
            it = (
                SharedMemoryOutput(it, read_batch)
                .mp_prefetch(
                    grain.MultiprocessingOptions(
                        num_workers=o.num_workers, per_worker_buffer_size=o.worker_buffer_size
                    )
                )
                .map(OpenSlots())
            )
        if self.sharding is not None:
            shapes = {k: self.schema.fields[k].shape for k in self.encoded}
            it = it.map(ToGlobalArrays(self.sharding, self.global_batch_size, self.rows, shapes))
        return grain.experimental.ThreadPrefetchIterDataset(it, prefetch_buffer_size=o.prefetch)


def make_loader(
    paths_or_datasets: Any,
    *,
    global_batch_size: int,
    seed: int = 0,
    shuffle: bool = True,
    num_epochs: int | None = None,
    delta_timestamps: Mapping[str, Sequence[float]] | Sequence[Mapping] | None = None,
    drop_n_first_frames: int = 0,
    drop_n_last_frames: int = 0,
    weights: Sequence[float] | None = None,
    sharding: Any = None,
    decode_device: str = "cpu",
    host_index: int | None = None,
    host_count: int | None = None,
    episodes: Any = None,
    key_maps: Sequence[Mapping[str, str]] | None = None,
    num_workers: int | None = None,
    read_threads: int | None = None,
    worker_buffer_size: int | None = None,
    prefetch: int | None = None,
    mixture_block_size: int | None = DEFAULT_BLOCK_SIZE,
    batch_transform: Callable[[Batch], Batch] | None = None,
    autotune: bool = False,
) -> Loader:
    """Deterministic, resumable iterator of global batches over one or more jaxload datasets.

    Example::

        mesh = jax.make_mesh((jax.device_count(),), ("data",))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        loader = jaxload.make_loader(
            "out/my_dataset", global_batch_size=64, seed=0, sharding=sharding,
            delta_timestamps={"action": [i / 30 for i in range(16)]},
        )
        for step, batch in zip(range(1000), loader):
            params, opt_state, loss = train_step(params, opt_state, batch)
        state = loader.get_state()  # or save it with Orbax: jaxload.checkpoint.LoaderSave

    Order: batch k is positions [k*G, (k+1)*G) of a stream of epochs; each epoch is a
    permutation of the valid anchors (frames minus `drop_n_first_frames`/`drop_n_last_frames`
    of each episode) fixed by (seed, epoch); `shuffle=False` keeps source order. Batches run
    across epoch boundaries; with `num_epochs` the last incomplete batch is dropped.

    Hosts: this host reads rows [h*G/H, (h+1)*G/H) of every global batch (`host_index`,
    `host_count` default to JAX's process index and count). With `sharding` (a
    NamedSharding whose first axis shards the batch) each array is a global jax.Array built
    by jax.make_array_from_process_local_data from the rows this process's devices hold;
    without it the batch is this host's numpy part. "task" stays a numpy array of str.

    Mixtures: several datasets with `weights` (default: proportional to their anchors);
    see jaxload.sampling.mixture for the exact schedule and jaxload.pipeline.batch_schema for how differing keys
    share one batch (`key_maps` renames keys per dataset). Each batch has "dataset_index".

    Args beyond the contract: `episodes` (passed to jaxload.open), `num_workers` (Grain
    worker processes; 0 reads in this process) and `read_threads` (per process; default
    both from the core count, see `split_cores`: 0 workers up to 3 cores),
    `worker_buffer_size` (batches per worker), `prefetch` (batches buffered by the final
    thread), `mixture_block_size` (default: the smallest exact block, see
    jaxload.sampling.mixture), `key_maps` (per-dataset key renames), and `batch_transform` (a
    batch -> batch function run in the workers on this host's numpy part; define it at
    module level so worker processes can unpickle it).

    Video: `decode_device="auto"` picks "cuda" when torchcodec decodes on a GPU here and
    its NVDEC handles every camera's codec, else "cpu" (logged with the reason).
    `decode_device="cpu"` decodes in the workers. `"cuda"` (NVDEC) and `"device"` (any
    device torchcodec decodes on) need `sharding`: the workers only read, each camera of a
    batch travels compressed (`jaxload.decode.frames.EncodedFrames`; a `batch_transform` sees it
    so), and in this process every device decodes the rows it holds, handed to JAX through
    DLPack. `autotune=True` fills in num_workers, read_threads, worker_buffer_size,
    prefetch and decode_device from `jaxload.tools.autotune.recommend` (probing this machine and the
    data); the ones passed explicitly are kept (decode_device counts when not "cpu").

    The returned Loader is an iterator (not thread-safe: one consumer) with `get_state()`,
    `set_state(state, allow_global_batch_size_change=False)`, `start()`, `close()` (also a
    context manager), `position`, `epoch`, `epoch_size`, `num_batches`, `element_spec`.
    """
    if global_batch_size < 1:
        raise ValueError(f"global_batch_size must be >= 1, got {global_batch_size}")
    if num_epochs is not None and num_epochs < 1:
        raise ValueError(f"num_epochs must be None or >= 1, got {num_epochs}")
    datasets, names = _open_all(paths_or_datasets, delta_timestamps, episodes)
    stream = SampleStream(
        [d.episode_lengths for d in datasets],
        weights=weights,
        seed=seed,
        shuffle=shuffle,
        drop_n_first_frames=drop_n_first_frames,
        drop_n_last_frames=drop_n_last_frames,
        mixture_block_size=mixture_block_size,
    )
    schema = BatchSchema([d.element_spec() for d in datasets], key_maps)
    rows, host_count = _rows(global_batch_size, sharding, host_index, host_count)
    decode_device = resolve_decode_device(decode_device, datasets, sharding)
    options = PipelineOptions.resolve(
        num_workers, read_threads, worker_buffer_size, prefetch, decode_device
    )
    if autotune:
        options = _autotuned(options, datasets, delta_timestamps, host_count, sharding)
    encoded = _encoded_cameras(options.decode_device, datasets, schema, sharding)
    if options.num_workers > 0:
        _ensure_absl_flags_parsed()
    return Loader(
        datasets,
        names,
        stream,
        schema,
        global_batch_size=int(global_batch_size),
        seed=int(seed),
        shuffle=bool(shuffle),
        drop_n_first_frames=int(drop_n_first_frames),
        drop_n_last_frames=int(drop_n_last_frames),
        num_epochs=num_epochs,
        rows=rows,
        host_count=host_count,
        sharding=sharding,
        options=options,
        batch_transform=batch_transform,
        encoded=encoded,
    )


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
    """How the pipeline runs (never what it yields): workers, threads, buffers, decode."""

    num_workers: int
    read_threads: int = 2
    worker_buffer_size: int = 2
    prefetch: int = 2
    decode_device: str = "cpu"
    explicit: tuple[str, ...] = ()  # the ones the caller set (autotune keeps them)

    @classmethod
    def resolve(
        cls,
        num_workers: int | None,
        read_threads: int | None,
        worker_buffer_size: int | None,
        prefetch: int | None,
        decode_device: str,
    ) -> PipelineOptions:
        given = {
            "num_workers": num_workers,
            "read_threads": read_threads,
            "worker_buffer_size": worker_buffer_size,
            "prefetch": prefetch,
            # "cpu" is the contract's default, so only another value counts as a choice.
            "decode_device": None if decode_device == "cpu" else decode_device,
        }
        if decode_device not in (*DECODE_DEVICES, "auto"):
            raise ValueError(f"decode_device={decode_device!r}; choose one of {DECODE_DEVICES}")
        set_ = {k: v for k, v in given.items() if v is not None}
        kw = {k: int(v) for k, v in set_.items() if k != "decode_device"}
        if "num_workers" not in kw:
            workers, threads = split_cores(os.cpu_count() or 2)
            kw["num_workers"] = workers
            kw.setdefault("read_threads", threads)
        return cls(
            decode_device=decode_device,
            explicit=tuple(sorted(set_)),
            **kw,
        )


def _autotuned(
    options: PipelineOptions, datasets: list, delta_timestamps: Any, host_count: int, sharding: Any
) -> PipelineOptions:
    """Apply jaxload.tools.autotune.recommend's recommendation to the knobs the caller left unset."""
    from jaxload.tools.autotune.recommend import tuned_loader_kwargs

    explicit = {k: getattr(options, k) for k in options.explicit}
    windows = delta_timestamps if isinstance(delta_timestamps, Mapping) else None
    tuned = tuned_loader_kwargs(
        datasets, delta_timestamps=windows, host_count=host_count, overrides=explicit
    )
    if tuned.get("decode_device", "cpu") != "cpu" and sharding is None:
        tuned["decode_device"] = "cpu"  # decoding onto devices needs to know which: `sharding`
    fields = {f.name for f in dataclasses.fields(PipelineOptions)}
    return dataclasses.replace(options, **{k: v for k, v in tuned.items() if k in fields})


def _encoded_cameras(
    decode_device: str, datasets: Sequence[Any], schema: BatchSchema, sharding: Any
) -> tuple[str, ...]:
    """Camera keys (batch names) the training process decodes; () when workers decode."""
    if decode_device == "cpu":
        return ()
    if sharding is None:
        raise ValueError(
            f"decode_device={decode_device!r} decodes each row on the device that holds it: "
            "pass `sharding` (a NamedSharding over the batch axis)"
        )
    if decode_device == "cuda" and any(d.platform != "gpu" for d in sharding.addressable_devices):
        raise ValueError("decode_device='cuda' needs GPU devices in `sharding`; use 'cpu'")
    per_dataset = [
        {rename_key(c, m) for c in d.camera_keys}
        for d, m in zip(datasets, schema.key_maps, strict=True)
    ]
    cameras = set().union(*per_dataset)
    for d, (ds, cams) in enumerate(zip(datasets, per_dataset, strict=True)):
        if cams and not hasattr(ds, "read_encoded"):
            raise ValueError(f"dataset {d} cannot hand over encoded video (no read_encoded)")
        if cams != cameras:
            raise ValueError(
                f"decode_device={decode_device!r} needs every camera in every dataset; dataset "
                f"{d} lacks {sorted(cameras - cams)} (use decode_device='cpu' for such mixtures)"
            )
    return tuple(sorted(cameras))


# Loaders with a live pipeline. Closed before interpreter teardown: Grain's own __del__
# would otherwise run against half-finalized modules and print tracebacks at exit.
_RUNNING: weakref.WeakSet[Loader] = weakref.WeakSet()


@atexit.register
def _close_running_loaders() -> None:
    for loader in list(_RUNNING):
        loader.close()


def _start_workers(iterator: Any) -> None:
    """Start every worker process now rather than one after another.

    Grain's ThreadPrefetchDatasetIterator asks its parent for its state on creation, which
    makes mp_prefetch's interleave create its worker iterators unstarted; each worker then
    starts (seconds: it imports jax, torch, ...) only when the round robin first reaches it.
    Grain's own `start_prefetch` on the interleave starts them all at once. This walks
    private attributes (grain is pinned); if they change we merely lose the eager start.
    """
    node = iterator
    for _ in range(32):
        if hasattr(node, "_iterators_in_use") and hasattr(node, "start_prefetch"):
            node.start_prefetch()
            return
        parents = getattr(node, "__dict__", {}).get("_parents") or ()
        if not parents:
            return
        node = parents[0]


def _rows(
    global_batch_size: int, sharding: Any, host_index: int | None, host_count: int | None
) -> tuple[np.ndarray, int]:
    """This host's rows of each global batch, and the host count recorded in the state."""
    if sharding is None:
        index, count = hosts.resolve_hosts(host_index, host_count)
        return hosts.host_rows(global_batch_size, index, count), count
    import jax

    if (host_index, host_count) not in ((None, None), (jax.process_index(), jax.process_count())):
        raise ValueError(
            "host_index/host_count simulate hosts for numpy batches; with `sharding` the rows "
            "come from the devices of this process, so leave them unset"
        )
    batch_axes = sharding.spec[0] if len(sharding.spec) else None
    axes = (
        () if batch_axes is None else (batch_axes,) if isinstance(batch_axes, str) else batch_axes
    )
    shards = int(np.prod([sharding.mesh.shape[a] for a in axes]))
    if global_batch_size % shards:
        raise ValueError(
            f"global_batch_size {global_batch_size} is not divisible by the {shards} batch shards "
            f"of the sharding {sharding.spec}"
        )
    return hosts.sharding_rows(sharding, global_batch_size), jax.process_count()


def _ensure_absl_flags_parsed() -> None:
    """Grain's worker processes read absl flags; a plain script never parses them."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
