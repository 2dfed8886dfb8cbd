"""`LoaderSpec`: everything `make_loader` resolved, in one frozen object.

make_loader (jaxload.resolution.make_loader) checks and resolves its arguments once: the
datasets opened, the sample stream, the batch schema, this host's rows, the keys a batch
holds, where video is decoded and where image transforms run, the pipeline options, the
remote stores. Every stage takes the spec instead of a list of arguments::

    spec = resolve_spec(...)            # make_loader does this
    Loader(spec)                        # iteration and state
    ReadBatch(spec, start)              # batch number -> this host's rows (in the readers)
    ToGlobalArrays(spec)                # numpy rows -> global jax.Arrays (training process)

A spec never changes; what the readers need of it travels to worker processes pickled
(`for_readers`: without the device sharding, which only the training process uses).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxload.batch.keys import KeySelection
from jaxload.batch.schema import BatchSchema
from jaxload.episode_dataset import EpisodeDataset, dataset_view
from jaxload.metadata import shape_dtype_structs
from jaxload.options import PipelineOptions
from jaxload.placement.transforms import transformed_spec
from jaxload.sampling.stream import SampleStream
from jaxload.state import LoaderState, stream_fingerprint
from jaxload.transforms.compose import ImageTransforms


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where video is decoded and where image transforms run.

    Attributes:
        decode_device: "cpu" (in the readers), "cuda" or "device" (in the training
            process, each device decoding the rows it holds), or "hybrid" (the readers
            decode a share of each device's rows, measured as it runs:
            `jaxload.placement.split`); "auto" is resolved already.
        encoded: batch keys of the cameras that travel compressed from the readers and are
            decoded in the training process; () when the readers decode everything.
        streams: (codec, height, width) of the encoded cameras' video streams (sizes the
            NVDEC decoder cache, `jaxload.decode.nvdec`).
        image_transforms: the image transforms bound to the batch's cameras, or None.
        image_transforms_on: "cpu" (in the readers) or "device" (jitted over the global
            batch after decode).
    """

    decode_device: str = "cpu"
    encoded: tuple[str, ...] = ()
    image_transforms: ImageTransforms | None = None
    image_transforms_on: str = "cpu"
    streams: tuple[tuple[str, int, int], ...] = ()

    @property
    def transforms_in_readers(self) -> ImageTransforms | None:
        """The image transforms the readers apply (None when the devices do)."""
        return self.image_transforms if self.image_transforms_on == "cpu" else None

    @property
    def transforms_on_devices(self) -> ImageTransforms | None:
        """The image transforms the devices apply after decode (None when the readers do)."""
        return self.image_transforms if self.image_transforms_on == "device" else None


@dataclasses.dataclass(frozen=True, eq=False)
class LoaderSpec:
    """A loader's resolved definition: what is read, in which order, which rows this host
    takes, what a batch holds and how the pipeline runs.

    Attributes:
        names: each dataset's name (its path or URL), for messages and the state.
        datasets: the opened datasets (`jaxload.open`'s, or any map-style dataset with
            `episode_lengths`), one per source.
        stream: global position -> (dataset, position in it) (jaxload.sampling.stream).
        schema: how the datasets' keys share one batch (jaxload.batch.schema).
        keys: the keys a batch holds (jaxload.batch.keys).
        global_batch_size: rows of a global batch.
        seed, shuffle, drop_n_first_frames, drop_n_last_frames: the order's definition
            (already in `stream`; kept for the state and messages).
        num_epochs: epochs to read, None for ever.
        rows: this host's rows of every global batch, sorted.
        host_count: hosts reading the global batch (recorded in the state).
        sharding: the batch's NamedSharding (global jax.Arrays), or None (numpy batches).
        placement: where video is decoded and image transforms run.
        batch_transforms: batch -> batch callables run in the readers, in order.
        options: the resolved pipeline options (every knob set).
        remote_stores: dataset number -> its `jaxload.storage.remote.RemoteStore`, for the
            datasets read from object storage.
        source_transforms: per dataset, its own image transforms (`DatasetSource`'s, bound
            to its cameras' batch keys), run in the readers before the loader's; () or None
            entries where there are none (jaxload.placement.transforms).
    """

    names: tuple[str, ...]
    datasets: tuple[EpisodeDataset, ...]
    stream: SampleStream
    schema: BatchSchema
    keys: KeySelection
    global_batch_size: int
    seed: int
    shuffle: bool
    drop_n_first_frames: int
    drop_n_last_frames: int
    num_epochs: int | None
    rows: np.ndarray
    host_count: int
    sharding: Any
    placement: Placement
    batch_transforms: tuple[Callable[[dict[str, Any]], dict[str, Any]], ...]
    options: PipelineOptions
    remote_stores: Mapping[int, Any] = dataclasses.field(default_factory=dict)
    source_transforms: tuple[ImageTransforms | None, ...] = ()
    # decode_device="auto" where the devices can decode: what was measured and chosen
    # (jaxload.placement.choice.DecodeChoice); None otherwise.
    decode_choice: Any = None

    # -- derived ----------------------------------------------------------------------------

    @functools.cached_property
    def fingerprint(self) -> str:
        """The stream's identity: the datasets' content and their selected episodes."""
        return stream_fingerprint(
            [d.fingerprint for d in self.datasets],
            [d.episode_index for d in self.datasets],
            [d.episode_lengths for d in self.datasets],
        )

    def positions(self, start: int, k: int) -> np.ndarray:
        """Global stream positions of this host's rows of batch k after position `start`."""
        return int(start) + int(k) * self.global_batch_size + self.rows

    def num_batches(self, position: int) -> int | None:
        """Batches left from `position`; None when the stream repeats for ever."""
        if self.num_epochs is None:
            return None
        left = self.num_epochs * self.stream.epoch_size - position
        return max(0, left // self.global_batch_size)

    @property
    def element_spec(self) -> dict[str, Any]:
        """A `jax.ShapeDtypeStruct` per array key of a batch: the global shape with
        `sharding` (dtypes as the jax.Arrays have them: int64 is int32 unless
        `jax_enable_x64`), this host's numpy rows without; after the image transforms (the
        readers' are in the schema already), before any `batch_transform`; only the keys a
        batch holds."""
        rows = self.global_batch_size if self.sharding is not None else len(self.rows)
        fields = self.schema.element_spec
        if self.keys.keys is None:
            names = [k for k in fields if self.keys.default_holds(k)]
        else:
            names = [k for k in self.keys.keys if k in fields]
        spec = {k: ((rows, *fields[k][0]), fields[k][1]) for k in names}
        spec = transformed_spec(spec, self.placement.transforms_on_devices)
        if self.sharding is not None:
            spec = {k: (shape, _as_jax_dtype(dtype)) for k, (shape, dtype) in spec.items()}
        return shape_dtype_structs(spec)

    def state_at(self, position: int) -> LoaderState:
        """The loader state whose next batch starts at global `position`."""
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
            sources=self.names,
            views=tuple(dataset_view(d) for d in self.datasets),
        )

    def for_readers(self) -> LoaderSpec:
        """This spec as the readers get it (pickled into worker processes): without the
        device sharding, which only the training process uses."""
        return dataclasses.replace(self, sharding=None) if self.sharding is not None else self

    def describe(self, start: int, k: int) -> str:
        """What batch k after `start` reads, for error messages: its global positions and,
        per dataset, the episodes they fall in."""
        positions = self.positions(start, k)
        dataset_ids, ds_positions = self.stream.locate(positions)
        parts = []
        for d in np.unique(dataset_ids):
            ds = self.datasets[d]
            starts = np.cumsum(ds.episode_lengths) - ds.episode_lengths
            rows = np.searchsorted(starts, ds_positions[dataset_ids == d], "right") - 1
            episodes = np.unique(np.asarray(ds.episode_index)[rows]).tolist()
            parts.append(f"{self.names[d]} episodes {_few(episodes)}")
        return f"global positions {positions.min()}..{positions.max()}: {'; '.join(parts)}"


def _as_jax_dtype(dtype: Any) -> np.dtype:
    """The dtype a jax.Array made from a numpy array of `dtype` has (64-bit types are
    32-bit unless `jax_enable_x64`)."""
    import jax

    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _few(items: list, limit: int = 8) -> str:
    """A list for a message, cut after `limit` items."""
    head = ", ".join(str(i) for i in items[:limit])
    return f"[{head}{', ...' if len(items) > limit else ''}]"
