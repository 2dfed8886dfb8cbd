"""`LoaderRequest`: what `make_loader` was asked to read and batch, as one value, so that
each phase of `jaxload.resolution.resolve` takes the request instead of the same long list
of arguments again.

    request = LoaderRequest("out/demo", global_batch_size=8, delta_frames={"action": range(4)})
    read = resolve_read(request)                            # phase 1, what is read
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxload.sampling.mixture import DEFAULT_BLOCK_SIZE
from jaxload.sampling.weights import MixtureWeights


@dataclasses.dataclass(frozen=True)
class LoaderRequest:
    """make_loader's arguments other than how the pipeline runs (`PipelineOptions`), as
    given (checked by `jaxload.resolution.arguments.check_arguments`); each field means
    what make_loader's argument of that name does.

    Example:
        >>> request = LoaderRequest("out/demo", global_batch_size=8, seed=1)
        >>> request.global_batch_size, request.shuffle, request.image_transforms_on
        (8, True, 'auto')
    """

    paths_or_datasets: Any
    global_batch_size: int
    seed: int = 0
    shuffle: bool = True
    num_epochs: int | None = None
    delta_timestamps: Any = None
    delta_frames: Any = None
    snap_windows: bool = False
    drop_n_first_frames: int = 0
    drop_n_last_frames: int = 0
    weights: Sequence[float] | MixtureWeights | str | None = None
    sharding: Any = None
    host_index: int | None = None
    host_count: int | None = None
    batch_transform: Callable | None = None
    mixture_block_size: int | None = DEFAULT_BLOCK_SIZE
    episodes: Any = None
    key_maps: Sequence[Mapping[str, str]] | None = None
    keys: Sequence[str] | None = None
    image_transforms: Any = None
    image_transforms_on: str = "auto"
    storage_options: Mapping[str, Any] | None = None
    remote: Any = None
