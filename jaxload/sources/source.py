"""What a loader reads: one `DatasetSource` per dataset of a mixture.

    sources = [
        jaxload.DatasetSource("out/aloha", weight=3, episodes=range(40)),
        jaxload.DatasetSource("out/pusht", cameras={"observation.images.top": "observation.image"},
                              image_transforms=[jaxload.transforms.Resize((224, 224))]),
    ]
    loader = jaxload.make_loader(sources, global_batch_size=64,
                                 delta_frames={"action": range(16)})

Bare paths (and datasets opened with `jaxload.open`) are sources with no options. The
make_loader arguments `episodes`, `delta_timestamps`, `delta_frames`, `weights` and
`key_maps` stay as shorthands: one value shared by every dataset, or (`delta_timestamps`,
`delta_frames`, `weights`, `key_maps`, and `episodes` as a list with one selection per
dataset) one per dataset. Windows are resolved at each dataset's fps by
`jaxload.sources.windows`.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jaxload.episode_dataset import EpisodeDataset, as_episode_dataset, is_dataset
from jaxload.sources.windows import resolve_windows
from jaxload.storage.urls import redact, warn_if_unused


@dataclasses.dataclass(frozen=True)
class DatasetSource:
    """One dataset of a loader and what to take from it.

    Attributes:
        path: a converted dataset's directory, or a dataset already opened with
            `jaxload.open` (then its own episodes and windows apply).
        weight: sampling weight in a mixture (default: its number of valid anchors).
        episodes: episode indices to serve (default: all).
        delta_timestamps: LeRobot-style windows for this dataset (keys it has), in seconds
            (multiples of its 1/fps).
        key_map: renames this dataset's keys in the batch (`{key}_is_pad` follows).
        storage_options: fsspec options (endpoint, credentials) when `path` is a URL
            (s3://, gs://, hf://, https://); never in the repr (they hold credentials).
        delta_frames: windows in frames at this dataset's own fps, `{"action": range(16)}`
            (beside `delta_timestamps`, for other keys).
        cameras: the batch's camera keys and this dataset's camera behind each,
            `{"observation.images.primary": "observation.images.top"}` (None: the dataset
            has no such camera; its rows are zeros with `{key}_is_pad` True). The dataset's
            cameras not named are left out of the batch and not decoded. Applied before
            `key_map`.
        image_transforms: steps (or a `jaxload.ImageTransforms`) for this dataset's
            cameras, run in the readers before cameras of several datasets share a batch
            key, e.g. `[jaxload.transforms.Resize((224, 224))]`; `keys` name this dataset's
            own cameras. The loader's `image_transforms` run after them.

    Example::

        jaxload.DatasetSource("out/droid", weight=2.0, delta_frames={"action": range(16)},
                              cameras={"observation.images.primary": "observation.images.exterior_1"})
    """

    path: Any
    weight: float | None = None
    episodes: Iterable[int] | None = None
    delta_timestamps: Mapping[str, Sequence[float]] | None = None
    key_map: Mapping[str, str] | None = None
    storage_options: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    delta_frames: Mapping[str, Sequence[int]] | None = None
    cameras: Mapping[str, str | None] | None = None
    image_transforms: Any = None

    def __post_init__(self) -> None:
        if is_dataset(self.path) and (
            self.episodes is not None or self.delta_timestamps or self.delta_frames
        ):
            raise ValueError(
                "episodes/delta_timestamps/delta_frames apply when jaxload opens a path; pass "
                "them to jaxload.open for datasets you open yourself (a map-style dataset of "
                'your own returns its windows itself: docs/LOADER.md, "Your own dataset")'
            )
        if self.cameras is not None:
            _check_cameras(self.cameras, self.name)
        if self.episodes is not None:
            object.__setattr__(self, "episodes", _episode_list(self.episodes, "episodes"))
            if not self.episodes:
                raise ValueError(
                    f"{self.name}: episodes is empty, so there is nothing to read; pass None "
                    "for every episode"
                )

    def __repr__(self) -> str:
        # The path without a URL's credentials; storage_options never (they hold them).
        fields = [f.name for f in dataclasses.fields(self) if f.repr and f.name != "path"]
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in fields)
        path = self.path if is_dataset(self.path) else redact(self.path)
        return f"DatasetSource(path={path!r}, {shown})"

    @property
    def name(self) -> str:
        """The path, or an opened dataset's name (its type name when it has no path)."""
        if is_dataset(self.path):
            return as_episode_dataset(self.path).name
        return redact(self.path)  # a URL's credentials never in a message


def as_sources(
    paths_or_datasets: Any,
    *,
    episodes: Any = None,
    delta_timestamps: Any = None,
    weights: Sequence[float] | None = None,
    key_maps: Sequence[Mapping[str, str]] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    delta_frames: Any = None,
    snap_windows: bool = False,
) -> list[DatasetSource]:
    """make_loader's first argument and shorthands as one DatasetSource per dataset, with
    windows resolved at each dataset's fps (jaxload.sources.windows)."""
    if isinstance(paths_or_datasets, str | os.PathLike | DatasetSource) or is_dataset(
        paths_or_datasets
    ):
        items = [paths_or_datasets]
    elif isinstance(paths_or_datasets, list | tuple):  # a mixture
        items = list(paths_or_datasets)
    else:  # never iterated: a map-style dataset without episode_lengths would be read whole
        as_episode_dataset(paths_or_datasets)  # raises, saying what a dataset needs
        items = [paths_or_datasets]
    if not items:
        raise ValueError("make_loader needs at least one dataset")
    sources = [s if isinstance(s, DatasetSource) else DatasetSource(s) for s in items]
    n = len(sources)
    per = {
        "episodes": _episodes_per_dataset(episodes, n),
        "weight": _one_each(weights, n, "weights"),
        "key_map": _one_each(key_maps, n, "key_maps"),
        "storage_options": [
            None if storage_options is None or is_dataset(s.path) else storage_options
            for s in sources
        ],
        # One dict for a mixture is shared (each dataset takes its keys; source_windows).
        "delta_timestamps": _windows_each(delta_timestamps, n, "delta_timestamps"),
        "delta_frames": _windows_each(delta_frames, n, "delta_frames"),
    }
    out = []
    for i, source in enumerate(sources):
        changes = {}
        for field, values in per.items():
            if values[i] is None:
                continue
            if getattr(source, field) is not None:
                raise ValueError(
                    f"dataset {i} ({source.name}): {field} set both in its DatasetSource and "
                    "as a make_loader argument"
                )
            changes[field] = values[i]
        out.append(dataclasses.replace(source, **changes))
    shared = n > 1
    return resolve_windows(
        out,
        delta_timestamps if shared and isinstance(delta_timestamps, Mapping) else None,
        delta_frames if shared and isinstance(delta_frames, Mapping) else None,
        snap=bool(snap_windows),
        read_info=lambda s: read_info_at(s.path, s.storage_options),
    )


def open_sources(sources: Sequence[DatasetSource], remote: Any = None) -> list[EpisodeDataset]:
    """The dataset of each source (opened where it is a path or URL, windows in frames;
    `remote`: the `jaxload.RemoteOptions` of URLs; any other map-style dataset wrapped once,
    `jaxload.episode_dataset.MapDataset`)."""
    from jaxload.dataset import JaxloadDataset

    paths = [s.path for s in sources if not is_dataset(s.path)]
    if paths:
        options = next((s.storage_options for s in sources if s.storage_options), None)
        warn_if_unused(paths, options, remote)
    return [
        as_episode_dataset(s.path)
        if is_dataset(s.path)
        else JaxloadDataset(
            s.path,
            delta_timestamps=s.delta_timestamps,
            delta_frames=s.delta_frames,
            episodes=s.episodes,
            storage_options=s.storage_options,
            remote=remote,
        )
        for s in sources
    ]


def source_key_map(source: DatasetSource, dataset: EpisodeDataset) -> dict[str, str | None]:
    """The batch name of each of the dataset's keys that is not its own (None: left out):
    its `cameras` (named cameras under their batch keys, the others left out), then its
    `key_map`.

    Example (a dataset with cameras "image" and "wrist_image")::

        source_key_map(DatasetSource(path, cameras={"observation.images.primary": "image"}), ds)
        # {"image": "observation.images.primary", "wrist_image": None}
    """
    key_map: dict[str, str | None] = dict(source.key_map or {})
    if source.cameras is None:
        return key_map
    own = list(dataset.camera_keys)
    named = {c: k for k, c in source.cameras.items() if c is not None}
    unknown = sorted(c for c in named if c not in own)
    if unknown:
        raise ValueError(
            f"{source.name}: cameras names {unknown}, which this dataset does not have (its "
            f"cameras: {own})"
        )
    twice = sorted(c for c in own if c in key_map)
    if twice:
        raise ValueError(
            f"{source.name}: cameras {twice} renamed both by `cameras` and by `key_map`; name "
            "each camera once"
        )
    return {**{c: named.get(c) for c in own}, **key_map}


def read_info_at(path: Any, storage_options: Mapping[str, Any] | None = None) -> Any:
    """meta/info.json of a local dataset or of one at a URL."""
    from jaxload.format.reader import read_info
    from jaxload.storage.object_store import open_storage

    return read_info(open_storage(path, storage_options=storage_options))


def _windows_each(value: Any, n: int, name: str) -> list:
    """Per-dataset windows from a make_loader shorthand: a list with one dict per dataset
    sets them; one dict for a mixture is shared (resolved in source_windows, so None here)."""
    if value is None or (isinstance(value, Mapping) and n > 1):
        return [None] * n
    if isinstance(value, Mapping):
        return [value]
    return _one_each(value, n, name)


def _check_cameras(cameras: Mapping[str, str | None], where: str) -> None:
    """`cameras`: batch camera key -> this dataset's camera key (or None)."""
    if not isinstance(cameras, Mapping):
        raise ValueError(
            f"{where}: cameras must be a dict {{batch camera key: this dataset's camera key}}, "
            f"got {type(cameras).__name__}"
        )
    seen: dict[str, str] = {}
    for target, own in cameras.items():
        if not isinstance(target, str) or not (own is None or isinstance(own, str)):
            raise ValueError(
                f"{where}: cameras maps batch keys (str) to this dataset's camera keys (str or "
                f"None), got {target!r}: {own!r}"
            )
        if own is not None and own in seen:
            raise ValueError(
                f"{where}: cameras names {own!r} for both {seen[own]!r} and {target!r}; a "
                "camera fills one batch key"
            )
        if own is not None:
            seen[own] = target


def _one_each(value: Any, n: int, name: str) -> list:
    """A list of n per-dataset values (None: none given)."""
    if value is None:
        return [None] * n
    if isinstance(value, Mapping | str) or not isinstance(value, Sequence):
        if n == 1:
            return [value]
        raise ValueError(f"{name}: one entry per dataset expected, got {value!r}")
    if len(value) != n:
        raise ValueError(f"{len(value)} {name} for {n} datasets")
    return list(value)


def _episodes_per_dataset(episodes: Any, n: int) -> list:
    """`episodes` as one selection per dataset.

    One selection (a flat iterable of episode indices) is shared by every dataset; a list
    of n entries that are each a selection (any iterable of ints, numpy arrays included) or
    None is one per dataset. Anything in between is an error, not a guess.
    """
    if episodes is None:
        return [None] * n
    if isinstance(episodes, str | bytes) or not isinstance(episodes, Iterable):
        raise ValueError(
            f"episodes: a list of episode indices (or one list per dataset), not {episodes!r}; "
            "one episode is episodes=[5]"
        )
    entries = list(episodes)
    integral = [isinstance(e, numbers.Integral) for e in entries]
    fraction = next(
        (e for e in entries if isinstance(e, numbers.Real) and not isinstance(e, numbers.Integral)),
        None,
    )
    if fraction is not None:
        raise ValueError(f"episodes: episode indices must be integers, got {fraction!r}")
    if all(integral):
        return [entries] * n
    if any(integral):
        raise ValueError(
            "episodes: mixes episode indices and per-dataset selections; pass one flat "
            "selection for every dataset, or one selection per dataset"
        )
    if len(entries) != n:
        raise ValueError(f"episodes: {len(entries)} selections for {n} datasets")
    return [
        None if e is None else _episode_list(e, f"episodes[{i}]") for i, e in enumerate(entries)
    ]


def _episode_list(episodes: Iterable[int], name: str) -> list[int]:
    out = []
    for e in episodes:
        if not isinstance(e, numbers.Integral):
            raise ValueError(f"{name}: episode indices must be integers, got {e!r}")
        out.append(int(e))
    return out
