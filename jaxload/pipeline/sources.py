"""What a loader reads: one `DatasetSource` per dataset of a mixture.

    sources = [
        jaxload.DatasetSource("out/aloha", weight=3, episodes=range(40)),
        jaxload.DatasetSource("out/pusht", key_map={"observation.image": "observation.images.top"}),
    ]
    loader = jaxload.make_loader(sources, global_batch_size=64,
                                 delta_timestamps={"action": [k / 50 for k in range(16)]})

Bare paths (and datasets opened with `jaxload.open`) are sources with no options. The
make_loader arguments `episodes`, `delta_timestamps`, `weights` and `key_maps` stay as
shorthands: one value shared by every dataset, or (`delta_timestamps`, `weights`,
`key_maps`, and `episodes` as a list with one selection per dataset) one per dataset.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jaxload.errors import WindowError
from jaxload.storage.urls import redact, warn_if_unused


@dataclasses.dataclass(frozen=True)
class DatasetSource:
    """One dataset of a loader and what to take from it.

    Attributes:
        path: a converted dataset's directory, or a dataset already opened with
            `jaxload.open` (then its own episodes and windows apply).
        weight: sampling weight in a mixture (default: its number of valid anchors).
        episodes: episode indices to serve (default: all).
        delta_timestamps: LeRobot-style windows for this dataset (keys it has).
        key_map: renames this dataset's keys in the batch (`{key}_is_pad` follows).
        storage_options: fsspec options (endpoint, credentials) when `path` is a URL
            (s3://, gs://, hf://, https://); never in the repr (they hold credentials).
    """

    path: Any
    weight: float | None = None
    episodes: Iterable[int] | None = None
    delta_timestamps: Mapping[str, Sequence[float]] | None = None
    key_map: Mapping[str, str] | None = None
    storage_options: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if is_dataset(self.path) and (self.episodes is not None or self.delta_timestamps):
            raise ValueError(
                "episodes/delta_timestamps apply when jaxload opens a path; pass them to "
                "jaxload.open for datasets you open yourself"
            )
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
        """The path, or an opened dataset's path (its type name when it has none)."""
        if is_dataset(self.path):
            return str(getattr(self.path, "path", type(self.path).__name__))
        return redact(self.path)  # a URL's credentials never in a message


def is_dataset(obj: Any) -> bool:
    """An opened dataset (jaxload.open's, or any with episode lengths and items)."""
    return hasattr(obj, "episode_lengths") and hasattr(obj, "__getitem__")


def as_sources(
    paths_or_datasets: Any,
    *,
    episodes: Any = None,
    delta_timestamps: Any = None,
    weights: Sequence[float] | None = None,
    key_maps: Sequence[Mapping[str, str]] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[DatasetSource]:
    """make_loader's first argument and shorthands as one DatasetSource per dataset."""
    items = (
        [paths_or_datasets]
        if isinstance(paths_or_datasets, str | os.PathLike | DatasetSource)
        or is_dataset(paths_or_datasets)
        else list(paths_or_datasets)
    )
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
        "delta_timestamps": (
            [delta_timestamps] * n
            if delta_timestamps is None or isinstance(delta_timestamps, Mapping)
            else _one_each(delta_timestamps, n, "delta_timestamps")
        ),
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
        if (
            n > 1
            and isinstance(delta_timestamps, Mapping)
            and not is_dataset(source.path)
            and "delta_timestamps" in changes
        ):
            changes["delta_timestamps"] = None  # filtered to the keys it has, below
        out.append(dataclasses.replace(source, **changes))
    if n > 1 and isinstance(delta_timestamps, Mapping) and delta_timestamps:
        out = _share_windows(out, delta_timestamps)
    return out


def open_sources(sources: Sequence[DatasetSource], remote: Any = None) -> list[Any]:
    """The dataset of each source (opened where it is a path or URL; `remote`: the
    `jaxload.RemoteOptions` of URLs)."""
    from jaxload.dataset import JaxloadDataset

    paths = [s.path for s in sources if not is_dataset(s.path)]
    if paths:
        options = next((s.storage_options for s in sources if s.storage_options), None)
        warn_if_unused(paths, options, remote)
    return [
        s.path
        if is_dataset(s.path)
        else JaxloadDataset(
            s.path,
            delta_timestamps=s.delta_timestamps,
            episodes=s.episodes,
            storage_options=s.storage_options,
            remote=remote,
        )
        for s in sources
    ]


def _share_windows(
    sources: list[DatasetSource], delta_timestamps: Mapping[str, Sequence[float]]
) -> list[DatasetSource]:
    """One delta_timestamps dict for a mixture: each dataset gets the keys it has."""
    keys = []
    for s in sources:
        if is_dataset(s.path):
            raise ValueError(
                "delta_timestamps apply when jaxload opens a path; pass them to jaxload.open "
                "for datasets you open yourself"
            )
        info = read_info_at(s.path, s.storage_options)
        keys.append({*info.features, *info.cameras})
    unknown = [k for k in delta_timestamps if not any(k in ks for ks in keys)]
    if unknown:
        names = [s.name for s in sources]
        raise WindowError(f"delta_timestamps keys {unknown} are in none of the datasets {names}")
    return [
        dataclasses.replace(
            s,
            delta_timestamps=s.delta_timestamps
            or ({k: v for k, v in delta_timestamps.items() if k in ks} or None),
        )
        for s, ks in zip(sources, keys, strict=True)
    ]


def read_info_at(path: Any, storage_options: Mapping[str, Any] | None = None) -> Any:
    """meta/info.json of a local dataset or of one at a URL."""
    from jaxload.format.reader import read_info
    from jaxload.storage.object_store import open_storage

    return read_info(open_storage(path, storage_options=storage_options))


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
