"""`LoaderSpec`: everything `make_loader` resolved, in one frozen value.

`jaxload.resolution.resolve` resolves make_loader's arguments once, in phases: what is read
(the datasets opened, their windows in frames, the sample stream, this host's rows), where
video is decoded and image transforms run (`jaxload.placement.decide`), the pipeline
options, then this spec. Every stage takes the spec (and the opened datasets, which the
`Loader` owns) instead of a list of arguments::

    spec, datasets = resolve(...)           # make_loader does this
    Loader(spec, datasets)                  # iteration and state; closes the datasets
    ReadBatch(spec, datasets, start)        # batch number -> this host's rows (in the readers)
    ToGlobalArrays(spec)                    # numpy rows -> global jax.Arrays (training process)

A spec is a value: names, fingerprints, stream, schema, rows, placement and options,
compared by what they define and cheap to pickle (it holds no opened dataset and no
store). What the readers need of it travels to worker processes (`for_readers`: without
the device sharding, which only the training process uses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxload.batch.keys import KeySelection
from jaxload.batch.schema import BatchSchema
from jaxload.metadata import shape_dtype_structs
from jaxload.options import PipelineOptions
from jaxload.placement.decide import Placement
from jaxload.placement.transforms import transformed_spec
from jaxload.sampling.stream import SampleStream
from jaxload.sources.read import HostBatches
from jaxload.state import LoaderState


@dataclasses.dataclass(frozen=True, eq=False)
class LoaderSpec(HostBatches):
    """A loader's resolved definition: what is read, in which order, which rows this host
    takes, what a batch holds and how the pipeline runs.

    Attributes:
        names: each dataset's name (its path or URL), for messages and the state.
        fingerprint: the stream's identity: the datasets' content and selected episodes.
        dataset_fingerprints: each dataset's fingerprint (content, episodes, windows).
        views: what each dataset's fingerprint covers, for the state's messages
            (`jaxload.episode_dataset.dataset_view`).
        episode_index, episode_lengths: each dataset's selected episodes and their
            lengths (messages name the episodes a batch reads).
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
        placement: where video is decoded and image transforms run, and what "auto"
            measured (`jaxload.placement.decide.Placement`).
        batch_transforms: batch -> batch callables run in the readers, in order.
        options: the pipeline options: the counts resolved, `decode_device` and
            `decode_threads` as asked (the placement holds what was decided).
    """

    names: tuple[str, ...]
    fingerprint: str
    dataset_fingerprints: tuple[str, ...]
    views: tuple[Mapping[str, Any], ...]
    episode_index: tuple[np.ndarray, ...]
    episode_lengths: tuple[np.ndarray, ...]
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

    # -- derived ----------------------------------------------------------------------------

    def _definition(self) -> tuple:
        """What the spec defines, as plain values (what == compares)."""
        mixture = self.stream.mixture
        return (
            self.names,
            self.fingerprint,
            self.dataset_fingerprints,
            self.stream.epoch_size,
            None if mixture is None else (tuple(mixture.quota.tolist()), mixture.block_size),
            tuple(sorted(self.schema.element_spec.items(), key=lambda kv: kv[0])),
            tuple(tuple(sorted(m.items())) for m in self.schema.key_maps),
            self.keys,
            self.global_batch_size,
            self.seed,
            self.shuffle,
            self.drop_n_first_frames,
            self.drop_n_last_frames,
            self.num_epochs,
            tuple(self.rows.tolist()),
            self.host_count,
            self.sharding,
            self.placement,
            self.batch_transforms,
            self.options,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoaderSpec):
            return NotImplemented
        return self._definition() == other._definition()

    def __hash__(self) -> int:
        return hash((self.fingerprint, self.names, self.global_batch_size, self.seed))

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
            dataset_fingerprints=self.dataset_fingerprints,
            shuffle=self.shuffle,
            drop_n_first_frames=self.drop_n_first_frames,
            drop_n_last_frames=self.drop_n_last_frames,
            mixture_quota=tuple(int(q) for q in mixture.quota) if mixture is not None else (),
            epoch_size=self.stream.epoch_size,
            sources=self.names,
            views=tuple(dict(v) for v in self.views),
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
            lengths = self.episode_lengths[d]
            starts = np.cumsum(lengths) - lengths
            rows = np.searchsorted(starts, ds_positions[dataset_ids == d], "right") - 1
            episodes = np.unique(np.asarray(self.episode_index[d])[rows]).tolist()
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
