"""`make_loader`: global batches from one or more jaxload datasets, and the `Loader`
that iterates them with exact, elastic state.

Batch k is global positions ``[k*G, (k+1)*G)`` of the sample stream (see
``jaxload.sampling.stream``); a batch's content depends on neither worker nor host count,
so the loader's state is the global position of the next batch (see ``jaxload.state``).
What is read: ``jaxload.pipeline.sources``; how: ``jaxload.pipeline.options``; the Grain
stages: ``jaxload.pipeline.stages``.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from jaxload.errors import RemoteError, WorkerTimeoutError
from jaxload.metadata import shape_dtype_structs
from jaxload.pipeline import main_guard, workers
from jaxload.pipeline.arguments import check_arguments, check_yields_a_batch, source_weights
from jaxload.pipeline.batch_keys import KeySelection, key_selection
from jaxload.pipeline.batch_schema import BatchSchema
from jaxload.pipeline.decode_device import cameras_decoded_on_device, resolve_decode_device
from jaxload.pipeline.hosts import this_host_rows
from jaxload.pipeline.image_transforms import resolve_image_transforms, transformed_spec
from jaxload.pipeline.options import PipelineOptions
from jaxload.pipeline.read_batch import Batch, ReadBatch
from jaxload.pipeline.sources import DatasetSource, as_sources, open_sources
from jaxload.pipeline.stages import ToGlobalArrays, build_pipeline
from jaxload.sampling.mixture import DEFAULT_BLOCK_SIZE
from jaxload.sampling.stream import SampleStream
from jaxload.state import LoaderState, check_compatible, stream_fingerprint
from jaxload.storage.prefetch import remote_stats, share_stats, with_lookahead
from jaxload.transforms.compose import ImageTransforms


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
        transforms: Sequence[Callable[[Batch], Batch]] = (),
        encoded: Sequence[str] = (),
        keys: KeySelection | None = None,
        image_transforms: ImageTransforms | None = None,
        image_transforms_on: str = "cpu",
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
        self.transforms, self.encoded = tuple(transforms), tuple(encoded)
        # which keys a batch holds (jaxload.pipeline.batch_keys)
        self.selection = keys or KeySelection(None, mixture=len(self.datasets) > 1)
        self.image_transforms, self.image_transforms_on = image_transforms, image_transforms_on
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
        """Start worker processes and prefetching now (otherwise the first next() does).

        Raises jaxload.errors.UnguardedScriptError, before any worker starts, when called
        from a script's top level outside `if __name__ == "__main__":` (see
        jaxload.pipeline.main_guard)."""
        if self._iterator is None:
            if self.options.num_workers > 0:
                main_guard.check_before_start(self.options.num_workers)
                share_stats(self.datasets)
            workers.reclaim_shared_memory()  # what crashed loaders on this machine left
            self._iterator = self.grain_dataset().__iter__()
            if self.options.num_workers > 0:
                workers.start_workers(self._iterator)
            self._iterator.start_prefetch()
            _RUNNING.add(self)
        return self

    def __next__(self) -> Batch:
        self.start()
        try:
            batch = next(self._iterator)
        except (WorkerTimeoutError, RemoteError) as e:
            # A stuck reader, or storage that gave up after its retries: the pipeline holds
            # the error and would raise it again. Dropped, so that the next next() reads the
            # same position anew (an outage that has ended costs one exception, not the loader).
            self._abandon(getattr(e, "pid", None))
            raise
        except RuntimeError as e:  # Grain's "worker process was terminated unexpectedly"
            unguarded = main_guard.explain_worker_crash(e)
            if unguarded is None:
                raise
            self.close()
            raise unguarded from e
        self._delivered += 1
        for store in self._remote_stores():  # workers' reads add up in one line, here
            store.log_progress()
        return batch

    def _abandon(self, stuck_pid: int | None) -> None:
        """Drops a pipeline whose reader is stuck; the next next() starts a new one at the
        same position. The stuck worker is killed (a stopped one would keep Grain's close
        waiting on it), and the rest closes in the background: a reader stuck on storage
        may never return."""
        if stuck_pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(stuck_pid, signal.SIGKILL)
        iterator, self._iterator = self._iterator, None
        _RUNNING.discard(self)
        for store in self._remote_stores():  # the next pipeline never waits on its fetches
            store.restart()
        if iterator is not None:
            threading.Thread(target=iterator.close, daemon=True, name="jaxload-abandon").start()

    def close(self) -> None:
        """Stop the background thread and the worker processes (a later next() restarts them)."""
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None
        for store in self._remote_stores():  # stop fetching ahead
            store.close()
        _RUNNING.discard(self)

    def _remote_stores(self) -> list[Any]:
        """The `RemoteStore` of each dataset read from object storage."""
        stores = (getattr(d, "remote_store", None) for d in self.datasets)
        return [s for s in stores if s is not None]

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
    def element_spec(self) -> dict[str, Any]:
        """A `jax.ShapeDtypeStruct` per array key of a batch (global shape with `sharding`).

        Describes the collated batch after `image_transforms` (cameras at their output size
        and dtype), before any `batch_transform`, restricted to the keys a batch holds
        (`keys`; string keys have no spec).
        """
        rows = self.global_batch_size if self.sharding is not None else len(self.rows)
        fields = self.schema.element_spec
        if self.selection.keys is None:
            names = [k for k in fields if self.selection.default_holds(k)]
        else:
            names = [k for k in self.selection.keys if k in fields]
        spec = {k: ((rows, *fields[k][0]), fields[k][1]) for k in names}
        return shape_dtype_structs(transformed_spec(spec, self.image_transforms))

    def __repr__(self) -> str:
        sources = repr(self.names)
        mixture = self.stream.mixture
        if mixture is not None:
            quota = ":".join(str(int(q)) for q in mixture.quota)
            sources += f" ({quota} per block of {mixture.block_size})"
        rows = self.rows
        if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
            part = f"rows {rows[0]}..{rows[-1]}"
        else:
            part = f"{len(rows)} rows"
        epochs = "" if self.num_epochs is None else f" of {self.num_epochs}"
        return (
            f"Loader(sources={sources}, global_batch_size={self.global_batch_size}, "
            f"seed={self.seed}, hosts={self.host_count} (this one: {part}), "
            f"workers={self.options.num_workers}, read_threads={self.options.read_threads}, "
            f"{self._transforms_repr()}"
            f"epoch={self.epoch}{epochs}, step={self.position // self.global_batch_size}, "
            f"position={self.position})"
        )

    def _transforms_repr(self) -> str:
        if self.image_transforms is None:
            return ""
        steps = ", ".join(type(t).__name__ for t in self.image_transforms.transforms)
        return f"image_transforms=[{steps}] on {self.image_transforms_on}, "

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

    @property
    def stats(self) -> dict[str, Any]:
        """Per remote dataset, the read counters of this process and its worker processes
        added up: requests, bytes fetched, cache hit rate, measured latency, transport
        (`jaxload.storage.remote.RemoteStore.stats`; a worker's are at most a second old).
        The loader's process also logs them (logger "jaxload.storage", level INFO, every
        `RemoteOptions.log_every_s`)."""
        return remote_stats(self.datasets)

    def read_batch(self) -> ReadBatch:
        """The per-batch read transform, anchored at the current position (remote datasets:
        fetching ahead of each batch, jaxload.storage.prefetch)."""
        read = ReadBatch(
            self.datasets,
            self.stream,
            self.schema,
            self.rows,
            start=self.position,
            global_batch_size=self.global_batch_size,
            transforms=self.transforms,
            encoded=self.encoded,
            keys=self.selection,
            image_transforms=self.image_transforms if self.image_transforms_on == "cpu" else None,
            seed=self.seed,
            with_positions=self.image_transforms_on == "device",
        )
        return with_lookahead(read, step=max(1, self.options.num_workers))

    def grain_dataset(self) -> grain.IterDataset:
        """The Grain pipeline from the current position on (what `next` iterates)."""
        to_global = None
        if self.sharding is not None:
            shapes = {k: self.schema.fields[k].shape for k in self.encoded}
            on_devices = self.image_transforms if self.image_transforms_on == "device" else None
            to_global = ToGlobalArrays(
                self.sharding, self.global_batch_size, self.rows, shapes, on_devices, self.seed
            )
        return build_pipeline(self.read_batch(), self.num_batches, self.options, to_global)


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
    options: PipelineOptions | None = None,
    batch_transform: Callable[[Batch], Batch] | None = None,
    mixture_block_size: int | None = DEFAULT_BLOCK_SIZE,
    episodes: Any = None,
    key_maps: Sequence[Mapping[str, str]] | None = None,
    num_workers: int | None = None,
    read_threads: int | None = None,
    worker_buffer_size: int | None = None,
    prefetch: int | None = None,
    autotune: bool = False,
    keys: Sequence[str] | None = None,
    image_transforms: Any = None,
    image_transforms_on: str = "auto",
    storage_options: Mapping[str, Any] | None = None,
    remote: Any = None,
) -> Loader:
    """Deterministic, resumable iterator of global batches over one or more jaxload datasets.

    Example (a batch goes into a jitted step as it is; parameters are replicated over the
    mesh, which `jax.make_mesh`'s Explicit axes need: docs/LOADER.md, "Batches and `jax.jit`")::

        >>> import jax, jax.numpy as jnp
        >>> from jax.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = jax.make_mesh((jax.device_count(),), ("data",))
        >>> loader = jaxload.make_loader(
        ...     "out/demo", global_batch_size=4, seed=0, sharding=NamedSharding(mesh, P("data")),
        ...     delta_timestamps={"action": [k / 10 for k in range(4)]},
        ... )
        >>> spec = loader.element_spec
        >>> w = jnp.zeros((spec["observation.state"].shape[-1], spec["action"].shape[-1]))
        >>> w = jax.device_put(w, NamedSharding(mesh, P()))  # replicated
        >>> @jax.jit
        ... def train_step(w, batch):
        ...     def loss(w):
        ...         pred = (batch["observation.state"] @ w)[:, None]  # one action for the chunk
        ...         valid = ~batch["action_is_pad"][..., None]
        ...         return (((pred - batch["action"]) ** 2) * valid).mean()
        ...     value, grad = jax.value_and_grad(loss)(w)
        ...     return w - 1e-3 * grad, value
        >>> for step, batch in zip(range(3), loader):
        ...     w, loss = train_step(w, batch)
        >>> loader
        Loader(sources=['out/demo'], global_batch_size=4, seed=0, hosts=1 (this one: rows 0..3), ..., epoch=0, step=3, position=12)
        >>> state = loader.get_state()  # or save it with Orbax: jaxload.LoaderSave
        >>> loader.close()

    What is read: `paths_or_datasets` is a path, a dataset opened with `jaxload.open`, a
    `jaxload.DatasetSource` (path, weight, episodes, windows, key map), or a list of them
    (a mixture). A path may be a URL (s3://, gs://, hf://, https://: read by byte range,
    verified, fetched ahead from the known order; `storage_options` for fsspec, `remote` a
    `jaxload.RemoteOptions`; docs/LOADER.md, "Remote datasets").
    `delta_timestamps`, `weights`, `episodes` and `key_maps` are shorthands
    for the sources' fields: one value shared by all datasets (a dict of windows, a flat
    episode selection), or a list with one entry per dataset.

    How it runs: `options` (a `jaxload.PipelineOptions`: workers, threads, buffers,
    decode device, autotune; default from the core count, see
    `jaxload.pipeline.options.split_cores`). `decode_device`, `num_workers`,
    `read_threads`, `worker_buffer_size`, `prefetch` and `autotune` are shorthands for its
    fields. None of these change what a batch holds.

    Order: batch k is positions [k*G, (k+1)*G) of a stream of epochs; each epoch is a
    permutation of the valid anchors (frames minus `drop_n_first_frames`/`drop_n_last_frames`
    of each episode) fixed by (seed, epoch); `shuffle=False` keeps source order. Batches run
    across epoch boundaries; with `num_epochs` the last incomplete batch is dropped.
    Mixtures follow jaxload.sampling.mixture (`mixture_block_size`: default the smallest
    exact block); jaxload.pipeline.batch_schema says how differing keys share one batch.

    Keys: by default a batch holds every key whose values are numeric or bool arrays, what
    `jax.jit` accepts: "task" and string features are left out, and "dataset_index" is
    there only in a mixture. `keys` (a list of names) selects exactly the keys a batch
    holds, strings and "dataset_index" included (jaxload.pipeline.batch_keys).

    Hosts: this host reads rows [h*G/H, (h+1)*G/H) of every global batch (`host_index`,
    `host_count` default to JAX's process index and count). With `sharding` (a
    NamedSharding whose first axis shards the batch) each array is a global jax.Array built
    by jax.make_array_from_process_local_data from the rows this process's devices hold;
    without it the batch is this host's numpy part. String keys asked for with `keys` stay
    numpy arrays of str (this host's rows).

    Transforms: `batch_transform` (batch -> batch) runs in the readers on this host's numpy
    part, before `keys` selects: it sees every key, "task" included (a tokenizer can make
    token arrays of it); define it at module level so worker processes can unpickle it.

    Image transforms: `image_transforms` (a jaxload.ImageTransforms, or a list of steps
    such as jaxload.transforms.RandomResizedCrop and ColorJitter) resize and augment every
    camera (or its `keys`), each row with random parameters keyed by (seed, its global
    position): the pixels of a position are the same for any worker or host count and
    after a restore. `image_transforms_on`: "cpu" in the readers, before
    `batch_transform`; "device" jitted over the global batch after decode (needs
    `sharding`; `batch_transform` then sees untransformed frames); "auto" (default)
    "device" when the devices decode the video, else "cpu". docs/LOADER.md, "Image
    transforms".

    Video: `decode_device="auto"` picks "cuda" when torchcodec decodes on a GPU here and
    its NVDEC handles every camera's codec, else "cpu" (logged with the reason).
    `decode_device="cpu"` decodes in the workers. `"cuda"` (NVDEC) and `"device"` (any
    device torchcodec decodes on) need `sharding`: the workers only read, each camera of a
    batch travels compressed (`jaxload.decode.frames.EncodedFrames`; a `batch_transform`
    sees it so), and in this process every device decodes the rows it holds, handed to JAX
    through DLPack. With autotune, the knobs left unset come from `jaxload.tools.autotune`.

    Worker processes run the top level of the script that started them again: start
    loaders with workers under `if __name__ == "__main__":` (jaxload.errors.
    UnguardedScriptError says so otherwise, before any worker starts; docs/LOADER.md,
    "Worker processes and the `__main__` guard"). They exit when this process dies.

    Faults (docs/LOADER.md, "Failure behaviour"): a reader that delivers no batch within
    `options.worker_timeout_s` raises jaxload.errors.WorkerTimeoutError naming it and the
    batch it owes (the next next() restarts the readers at the same position); a
    `batch_transform` that returns anything but the batch raises
    jaxload.errors.BatchTransformError.

    The returned Loader is an iterator (not thread-safe: one consumer) with `get_state()`,
    `set_state(state, allow_global_batch_size_change=False)`, `start()`, `close()` (also a
    context manager), `position`, `epoch`, `epoch_size`, `num_batches`, `element_spec`,
    and a repr saying what it reads and where it is.
    """
    check_arguments(
        global_batch_size=global_batch_size,
        seed=seed,
        num_epochs=num_epochs,
        drop_n_first_frames=drop_n_first_frames,
        drop_n_last_frames=drop_n_last_frames,
        mixture_block_size=mixture_block_size,
        host_index=host_index,
        host_count=host_count,
    )
    if batch_transform is not None and not callable(batch_transform):
        raise ValueError(
            f"batch_transform must be a callable (batch -> batch), got {batch_transform!r}"
        )
    sources = as_sources(
        paths_or_datasets,
        episodes=episodes,
        delta_timestamps=delta_timestamps,
        weights=weights,
        key_maps=key_maps,
        storage_options=storage_options,
    )
    datasets = open_sources(sources, remote=remote)
    for source, dataset in zip(sources, datasets, strict=True):
        if len(dataset.episode_lengths) == 0:
            raise ValueError(f"{source.name}: no episodes to read (an empty episode selection)")
    stream = SampleStream(
        [d.episode_lengths for d in datasets],
        weights=source_weights(sources),
        seed=seed,
        shuffle=shuffle,
        drop_n_first_frames=drop_n_first_frames,
        drop_n_last_frames=drop_n_last_frames,
        mixture_block_size=mixture_block_size,
    )
    key_maps = [dict(s.key_map or {}) for s in sources]
    schema = BatchSchema([d.element_spec() for d in datasets], key_maps)
    selection = key_selection(
        keys,
        [*schema.fields, *schema.strings],
        mixture=len(datasets) > 1,
        transform=batch_transform,
    )
    rows, host_count = this_host_rows(global_batch_size, sharding, host_index, host_count)
    options = (options or PipelineOptions()).merged(
        decode_device=decode_device,
        num_workers=num_workers,
        read_threads=read_threads,
        worker_buffer_size=worker_buffer_size,
        prefetch=prefetch,
        autotune=autotune or None,
    )
    options = dataclasses.replace(
        options, decode_device=resolve_decode_device(options.decode_device, datasets, sharding)
    )
    if options.autotune:
        options = _autotuned(options, sources, datasets, host_count, sharding)
    options = options.resolve(remote=any(_cached_in_memory(d) for d in datasets))
    encoded = cameras_decoded_on_device(options.decode_device, datasets, key_maps, sharding)
    image_transforms, image_transforms_on = resolve_image_transforms(
        image_transforms, image_transforms_on, datasets, key_maps, schema, encoded, sharding
    )
    if options.num_workers > 0:
        workers.ensure_absl_flags_parsed()
    check_yields_a_batch(stream.epoch_size, num_epochs, global_batch_size)
    return Loader(
        datasets,
        [s.name for s in sources],
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
        transforms=(batch_transform,) if batch_transform is not None else (),
        encoded=encoded,
        keys=selection,
        image_transforms=image_transforms,
        image_transforms_on=image_transforms_on,
    )


def _cached_in_memory(dataset: Any) -> bool:
    """Whether `dataset` is read from object storage with its record cache in memory (one
    more read thread pays there; with `cache_dir` the cache's lock serializes the file reads
    and the extra thread cost 10%)."""
    store = getattr(dataset, "remote_store", None)
    return store is not None and store.options.cache_dir is None


def _autotuned(
    options: PipelineOptions,
    sources: Sequence[DatasetSource],
    datasets: list,
    host_count: int,
    sharding: Any,
) -> PipelineOptions:
    """Apply jaxload.tools.autotune's recommendation to the knobs the caller left unset."""
    from jaxload.tools.autotune import tuned_loader_kwargs

    explicit = {k: getattr(options, k) for k in options.explicit}
    windows = sources[0].delta_timestamps if len(sources) == 1 else None
    tuned = tuned_loader_kwargs(
        datasets, delta_timestamps=windows, host_count=host_count, overrides=explicit
    )
    if tuned.get("decode_device", "cpu") != "cpu" and sharding is None:
        tuned["decode_device"] = "cpu"  # decoding onto devices needs to know which: `sharding`
    fields = {f.name for f in dataclasses.fields(PipelineOptions)} - {"autotune"}
    return dataclasses.replace(options, **{k: v for k, v in tuned.items() if k in fields})


# Loaders with a live pipeline. Closed before interpreter teardown: Grain's own __del__
# would otherwise run against half-finalized modules and print tracebacks at exit.
_RUNNING: weakref.WeakSet[Loader] = weakref.WeakSet()


@atexit.register
def _close_running_loaders() -> None:
    for loader in list(_RUNNING):
        loader.close()
