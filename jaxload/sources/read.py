"""`ReadSpec`: what a loader reads, resolved (the first phase of
`jaxload.resolution.resolve`): the opened datasets with their windows in frames, the sample
stream, each dataset's batch names, and this host's rows of every global batch.

Where video is decoded is measured on it (`jaxload.placement.choice`), before any loader
spec exists::

    read = resolve_read(LoaderRequest(paths, global_batch_size=64, ...))  # jaxload.resolution
    read.positions(0, k)                                    # this host's rows of batch k
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxload.episode_dataset import EpisodeDataset
from jaxload.sampling.stream import SampleStream
from jaxload.sources.source import DatasetSource


class HostBatches:
    """This host's rows of each global batch of a sample stream: what a spec with `stream`,
    `global_batch_size`, `rows` and `num_epochs` says of its batches (`ReadSpec` and
    `jaxload.resolution.spec.LoaderSpec` alike)."""

    stream: SampleStream
    global_batch_size: int
    rows: np.ndarray
    num_epochs: int | None

    def positions(self, start: int, k: int) -> np.ndarray:
        """Global stream positions of this host's rows of batch k after position `start`."""
        return int(start) + int(k) * self.global_batch_size + self.rows

    def num_batches(self, position: int) -> int | None:
        """Batches left from `position`; None when the stream repeats for ever."""
        if self.num_epochs is None:
            return None
        left = self.num_epochs * self.stream.epoch_size - position
        return max(0, left // self.global_batch_size)


@dataclasses.dataclass(frozen=True, eq=False)
class ReadSpec(HostBatches):
    """What is read, in which order, and which rows this host takes.

    Attributes:
        sources: one `DatasetSource` per dataset (windows resolved to frames).
        datasets: the opened datasets (`EpisodeDataset`s), one per source.
        names: each dataset's name.
        stream: global position -> (dataset, position in it).
        key_maps: per dataset, the batch name of each of its keys that is not its own.
        global_batch_size: rows of a global batch.
        rows: this host's rows of every global batch, sorted.
        host_count: hosts reading the global batch.
        sharding: the batch's NamedSharding, or None (numpy batches).
        num_epochs: epochs to read, None for ever.
    """

    sources: tuple[DatasetSource, ...]
    datasets: tuple[EpisodeDataset, ...]
    names: tuple[str, ...]
    stream: SampleStream
    key_maps: tuple[Mapping[str, str | None], ...]
    global_batch_size: int
    rows: np.ndarray
    host_count: int
    sharding: Any
    num_epochs: int | None
