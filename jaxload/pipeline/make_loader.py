"""`make_loader`, the facade: its arguments checked, resolved once in phases into a
`LoaderSpec` (`jaxload.resolution.resolve`), and the `Loader` (jaxload.pipeline.loader)
that runs it, owning the opened datasets.

What is read: ``jaxload.sources``; how: ``jaxload.options``; the order:
``jaxload.sampling.stream``; which rows this host takes: ``jaxload.batch.hosts``; what a
batch holds: ``jaxload.batch.schema`` and ``jaxload.batch.keys``; where video is decoded
and image transforms run: ``jaxload.placement.decide``.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxload.options import PipelineOptions
from jaxload.pipeline.loader import Batch, Loader
from jaxload.resolution.arguments import check_arguments
from jaxload.resolution.request import LoaderRequest
from jaxload.resolution.resolve import resolve
from jaxload.sampling.mixture import DEFAULT_BLOCK_SIZE
from jaxload.sampling.weights import MixtureWeights
from jaxload.workers import fork_server, main_guard
from jaxload.workers import processes as workers

log = logging.getLogger("jaxload.mixture")

# make_loader keywords that only repeat a PipelineOptions field (deprecated: `options=`).
DEPRECATED_SHORTHANDS = (
    "num_workers",
    "read_threads",
    "worker_buffer_size",
    "prefetch",
    "autotune",
)


def make_loader(
    paths_or_datasets: Any,
    *,
    global_batch_size: int,
    seed: int = 0,
    shuffle: bool = True,
    num_epochs: int | None = None,
    delta_timestamps: Mapping[str, Sequence[float]] | Sequence[Mapping] | None = None,
    delta_frames: Mapping[str, Sequence[int]] | Sequence[Mapping] | None = None,
    snap_windows: bool = False,
    drop_n_first_frames: int = 0,
    drop_n_last_frames: int = 0,
    weights: Sequence[float] | MixtureWeights | str | None = None,
    sharding: Any = None,
    decode_device: str | None = None,
    host_index: int | None = None,
    host_count: int | None = None,
    options: PipelineOptions | None = None,
    batch_transform: Callable[[Batch], Batch] | None = None,
    mixture_block_size: int | None = DEFAULT_BLOCK_SIZE,
    episodes: Any = None,
    key_maps: Sequence[Mapping[str, str]] | None = None,
    keys: Sequence[str] | None = None,
    image_transforms: Any = None,
    image_transforms_on: str = "auto",
    storage_options: Mapping[str, Any] | None = None,
    remote: Any = None,
    num_workers: int | None = None,
    read_threads: int | None = None,
    worker_buffer_size: int | None = None,
    prefetch: int | None = None,
    autotune: bool | None = None,
) -> Loader:
    """Deterministic, resumable iterator of global batches over one or more jaxload datasets.

    Batch k is global positions [k*G, (k+1)*G) of a stream of epochs; each epoch is a
    permutation of the valid anchors fixed by (seed, epoch), and each host reads a fixed
    part of every global batch, so a batch's content depends on neither the worker nor the
    host count, and the loader's state (`get_state`) restores bit-exactly on any number of
    hosts.

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

    Args:
        paths_or_datasets: what is read: a dataset path, a URL (s3://, gs://, hf://,
            https://: read by byte range, verified, fetched ahead from the known order;
            docs/LOADER.md, "Remote datasets"), a dataset opened with `jaxload.open`, a
            map-style dataset of your own with `episode_lengths`, `len` and `ds[i]`
            (docs/LOADER.md, "Your own dataset"), a `jaxload.DatasetSource` (path, weight,
            episodes, windows, key map), or a list of them (a mixture).
        global_batch_size: rows of each global batch, divisible by the host count (and by
            the batch shards of `sharding`).
        seed: fixes each epoch's permutation (an integer in [0, 2**64)).
        shuffle: False keeps source order.
        num_epochs: epochs to read (the last incomplete batch is dropped); None: for ever.
        delta_timestamps: LeRobot's windows, {key: offsets in seconds}; one dict shared by
            every dataset (each takes the keys it has), or a list with one per dataset.
            Every value must be a multiple of each dataset's 1/fps (a WindowError names the
            dataset, its fps and the nearest valid values) unless `snap_windows`. For a
            dataset opened with `jaxload.open`, give its windows there instead.
        delta_frames: windows in frames, {key: frame offsets}, counted at each dataset's own
            fps (`{"action": range(16)}`: 16 steps in a 10 fps and a 50 fps dataset alike);
            shared or per dataset as `delta_timestamps`, beside it for other keys.
        snap_windows: round `delta_timestamps` to each dataset's nearest frame instead of
            refusing values off its grid.
        drop_n_first_frames, drop_n_last_frames: frames of each episode that are never
            anchors.
        weights: mixture weights, one per dataset (default: their valid anchors), or a rule
            deriving them from the datasets' sizes: `jaxload.MixtureWeights(by="frames",
            temperature=..., cap=..., max_share=...)` (or just "frames", "episodes",
            "anchors", "uniform"), where each `DatasetSource(weight=...)` multiplies its
            dataset's. jaxload.sampling.mixture says how a mixture's blocks are filled
            exactly; `loader.mixture_table()` shows the result (logged at INFO on start).
        sharding: a NamedSharding whose first axis shards the batch: each array is then a
            global jax.Array built by jax.make_array_from_process_local_data from the rows
            this process's devices hold. None: the batch is this host's numpy rows.
        decode_device: where video is decoded: "cpu" (default: in the readers), "cuda"
            (torchcodec's NVDEC backend, onto each row's GPU, in this process, several
            decodes in flight per GPU: `options.decode_threads`), "device" (any device
            torchcodec decodes on) or "auto" (where torchcodec decodes on a GPU here and
            its NVDEC handles every camera's codec, the faster of "cpu" and "cuda", timed
            on the first batches; else "cpu"; the repr says which and why). "hybrid" was
            removed: it measured below either side alone. Anything but "cpu" needs
            `sharding`: the readers hand each camera over compressed
            (`jaxload.decode.frames.EncodedFrames`) and every device decodes the rows it
            holds, handed to JAX through DLPack. Sets `options.decode_device`.
        host_index, host_count: this host's part of each global batch (default: JAX's
            process index and count); given to simulate hosts in one process.
        options: how the pipeline runs (a `jaxload.PipelineOptions`: worker processes,
            read threads, buffers, autotune, the reader timeout; default from the core
            count). Never changes what a batch holds.
        batch_transform: batch -> batch, run in the readers on this host's numpy rows,
            before `keys` selects (it sees every key, "task" included: a tokenizer can make
            token arrays of it). Define it at module level so worker processes can
            unpickle it.
        mixture_block_size: the mixture's block (default: the smallest exact block).
        episodes: episode indices to read: one selection for every dataset, or a list with
            one selection (or None) per dataset.
        key_maps: per dataset, renames of its keys in the batch (`{key}_is_pad` follows;
            a key mapped to None is left out). `DatasetSource(cameras=...)` names cameras.
        keys: exactly the keys a batch holds, strings and "dataset_index" included. Default:
            every key `jax.jit` accepts ("task" and string features left out,
            "dataset_index" only in a mixture; jaxload.batch.keys).
        image_transforms: a `jaxload.ImageTransforms`, or a list of steps such as
            `jaxload.transforms.RandomResizedCrop` and `ColorJitter`: every camera (or the
            transforms' `keys`) resized and augmented with random parameters keyed by
            (seed, global position), the same for any worker or host count and after a
            restore (docs/LOADER.md, "Image transforms"). On "cpu" they run on each
            dataset's frames before these share a key, so a `Resize` brings cameras of
            different sizes to one. A source's own (`DatasetSource(image_transforms=...)`)
            run before them.
        image_transforms_on: "cpu" (in the readers, before `batch_transform`), "device"
            (jitted over the global batch after decode; needs `sharding`) or "auto"
            ("device" when the devices decode the video, else "cpu").
        storage_options: fsspec options (endpoint, credentials) of the datasets at URLs.
        remote: a `jaxload.RemoteOptions` (or a dict of its fields) for datasets at URLs:
            cache, concurrency, retries.
        num_workers, read_threads, worker_buffer_size, prefetch, autotune: deprecated
            shorthands for the `options` fields of the same names (a DeprecationWarning);
            pass `options=jaxload.PipelineOptions(...)`.

    Returns:
        A `Loader`: an iterator of batches (one consumer) with `get_state()`,
        `set_state(state, allow_global_batch_size_change=False)`, `start()`, `close()`
        (also a context manager), `position`, `epoch`, `epoch_size`, `num_batches`,
        `element_spec`, `spec` (the resolved `LoaderSpec`) and a repr saying what it reads
        and where it is.

    Raises:
        ValueError: an argument out of range, named with its rule.
        jaxload.errors.WindowError: windows that are not multiples of a dataset's 1/fps.
        jaxload.errors.DatasetError: a dataset that is missing or corrupt (naming the file).

    Worker processes run the top level of the script that started them again: start
    loaders with workers under `if __name__ == "__main__":` (jaxload.errors.
    UnguardedScriptError says so otherwise, before any worker starts; docs/LOADER.md,
    "Worker processes and the `__main__` guard"). They exit when this process dies. A
    reader that delivers no batch within `options.worker_timeout_s` raises
    jaxload.errors.WorkerTimeoutError (the next next() restarts the readers at the same
    position); a `batch_transform` that returns anything but the batch raises
    jaxload.errors.BatchTransformError (docs/LOADER.md, "Failure behaviour").
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
    shorthands = dict(num_workers=num_workers, read_threads=read_threads, prefetch=prefetch)
    shorthands |= dict(worker_buffer_size=worker_buffer_size, autotune=autotune)
    request = LoaderRequest(
        paths_or_datasets,
        global_batch_size=global_batch_size,
        seed=seed,
        shuffle=shuffle,
        num_epochs=num_epochs,
        delta_timestamps=delta_timestamps,
        delta_frames=delta_frames,
        snap_windows=snap_windows,
        drop_n_first_frames=drop_n_first_frames,
        drop_n_last_frames=drop_n_last_frames,
        weights=weights,
        sharding=sharding,
        host_index=host_index,
        host_count=host_count,
        batch_transform=batch_transform,
        mixture_block_size=mixture_block_size,
        episodes=episodes,
        key_maps=key_maps,
        keys=keys,
        image_transforms=image_transforms,
        image_transforms_on=image_transforms_on,
        storage_options=storage_options,
        remote=remote,
    )
    spec, datasets = resolve(request, _with_shorthands(options, decode_device, **shorthands))
    loader = Loader(spec, datasets)
    if spec.options.num_workers > 0:
        workers.ensure_absl_flags_parsed()
        if not main_guard.bootstrapping():  # (a worker re-running the script starts none)
            # The fork server imports the workers' modules while the trainer goes on.
            fork_server.start_fork_server(loader.has_video)
    if spec.stream.mixture is not None:
        log.info("mixture of %d datasets:\n%s", len(datasets), loader.mixture_table())
    return loader


def _with_shorthands(
    options: PipelineOptions | None, decode_device: str | None, **shorthands: Any
) -> PipelineOptions:
    """`options` with `decode_device` and the deprecated shorthands set.

    The shorthands warn and cannot be combined with `options` (one place says how the
    pipeline runs); `decode_device`, a make_loader keyword of the stable contract, sets
    `options.decode_device` unless `options` names another device."""
    given = {k: v for k, v in shorthands.items() if v is not None}
    if given:
        names = ", ".join(f"{k}={v!r}" for k, v in given.items())
        warnings.warn(
            f"make_loader({names}): these keywords are deprecated; pass "
            f"options=jaxload.PipelineOptions({names}) instead",
            DeprecationWarning,
            stacklevel=3,
        )
        if options is not None:
            raise TypeError(
                f"make_loader: pass {sorted(given)} inside `options` (a jaxload.PipelineOptions), "
                "not beside it"
            )
    options = dataclasses.replace(options or PipelineOptions(), **given)
    if decode_device is None or decode_device == options.decode_device:
        return options
    if options.decode_device != PipelineOptions.decode_device:
        raise ValueError(
            f"decode_device={decode_device!r}, but options.decode_device="
            f"{options.decode_device!r}: name the device once"
        )
    return dataclasses.replace(options, decode_device=decode_device)
