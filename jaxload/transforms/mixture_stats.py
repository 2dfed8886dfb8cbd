"""The statistics `Normalize.from_datasets` needs for whatever a loader reads: each
dataset's stats under its batch key names (after `DatasetSource(cameras=...)` and
`key_map`), per dataset or pooled, for vectors of different sizes too.

A mixture pads a vector feature to its widest size (state of 7 and 8 values: 8, with
`{key}_dim_is_pad`); so do these stats. Pooled over datasets of different sizes, each
dimension is merged over the datasets that have it (dims 0..6 over both, dim 7 over the
8-value one alone); per dataset, a dataset's padded dimensions normalize as the identity.

    parts = source_stats(["out/a", "out/b"], ["observation.state"])   # one dict per dataset
    pooled = merge_padded(parts)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.stats import FeatureStats, load_stats, merge_stats


def source_stats(
    paths_or_sources: Any,
    keys: Iterable[str] | None,
    key_maps: Sequence[Mapping[str, str | None]] | None = None,
    *,
    sketch: bool = True,
) -> tuple[list[str], list[dict[str, FeatureStats]]]:
    """(names, per dataset its stats of `keys` (None: all), batch names), for anything
    make_loader takes as its first argument: paths, URLs, `jaxload.DatasetSource`s, opened
    datasets, or a list of them; `key_maps` as make_loader's; `sketch=False` leaves out the
    histograms (`load_stats`)."""
    from jaxload.episode_dataset import is_dataset
    from jaxload.sources.source import DatasetSource

    items = (
        [paths_or_sources]
        if isinstance(paths_or_sources, str | os.PathLike | DatasetSource)
        or is_dataset(paths_or_sources)
        else list(paths_or_sources)
    )
    if not items:
        raise ValueError("Normalize.from_datasets needs at least one dataset")
    if key_maps is not None and len(key_maps) != len(items):
        raise ValueError(f"{len(key_maps)} key_maps for {len(items)} datasets")
    keys = None if keys is None else list(dict.fromkeys(keys))
    names, parts = [], []
    for i, item in enumerate(items):
        source = item if isinstance(item, DatasetSource) else DatasetSource(item)
        renames: dict[str, str | None] = {
            **{own: batch for batch, own in (source.cameras or {}).items() if own is not None},
            **dict(source.key_map or {}),
            **dict((key_maps or [{}] * len(items))[i] or {}),
        }
        inverse = {batch: own for own, batch in renames.items() if batch is not None}
        own_keys = None if keys is None else [inverse.get(k, k) for k in keys]
        stats = load_stats(_storage(source), own_keys, sketch=sketch)
        renamed = {renames.get(k, k): v for k, v in stats.items()}
        parts.append(
            {k: v for k, v in renamed.items() if k is not None and (keys is None or k in keys)}
        )
        names.append(source.name)
    return names, parts


def _storage(source: Any) -> Any:
    """Where a source's meta/stats.json is read: an opened dataset's storage, a URL's
    store (with its storage_options), or a local path."""
    from jaxload.episode_dataset import as_episode_dataset, is_dataset

    if is_dataset(source.path):
        storage = as_episode_dataset(source.path).storage
        if storage is None:
            raise ValueError(
                f"Normalize.from_datasets: {source.name} is not a jaxload dataset (no stats)"
            )
        return storage
    from jaxload.storage.object_store import open_storage

    return open_storage(source.path, storage_options=source.storage_options)


def merge_padded(parts: Sequence[Mapping[str, FeatureStats]]) -> dict[str, FeatureStats]:
    """Stats of the datasets pooled (count-weighted, `merge_stats`), per key over the
    datasets that have it; a vector whose size differs is merged per dimension over the
    datasets that have that dimension (quantiles then without their merge sketch, count
    that of the dimensions all share)."""
    keys = list(dict.fromkeys(k for p in parts for k in p))
    out = {}
    for key in keys:
        items = [p[key] for p in parts if key in p]
        shapes = {s.shape for s in items}
        if len(shapes) == 1 or not all(len(s) == 1 for s in shapes):
            out[key] = merge_stats([{key: s} for s in items])[key]
            continue
        out[key] = _merge_widths(key, items)
    return out


def _merge_widths(key: str, items: list[FeatureStats]) -> FeatureStats:
    """Vectors of several sizes: each run of dimensions merged over the items that reach it."""
    widths = sorted({s.shape[0] for s in items})
    pieces = []
    start = 0
    for stop in widths:
        having = [_take(s, start, stop) for s in items if s.shape[0] >= stop]
        pieces.append(merge_stats([{key: s} for s in having])[key])
        start = stop
    names = set.intersection(*(set(p.quantiles) for p in pieces))
    return FeatureStats(
        count=pieces[0].count,
        mean=np.concatenate([p.mean for p in pieces]),
        std=np.concatenate([p.std for p in pieces]),
        min=np.concatenate([p.min for p in pieces]),
        max=np.concatenate([p.max for p in pieces]),
        quantiles={q: np.concatenate([p.quantiles[q] for p in pieces]) for q in names},
    )


def _take(s: FeatureStats, start: int, stop: int) -> FeatureStats:
    """Dimensions [start, stop) of a vector's stats (histograms included)."""
    from jaxload.stats import Grid

    return FeatureStats(
        count=s.count,
        mean=s.mean[start:stop],
        std=s.std[start:stop],
        min=s.min[start:stop],
        max=s.max[start:stop],
        quantiles={q: v[start:stop] for q, v in s.quantiles.items()},
        quantile_error=None
        if s.quantile_error is None
        else {q: v[start:stop] for q, v in s.quantile_error.items()},
        grids=tuple(Grid(g.edges[start:stop], g.counts[start:stop]) for g in s.grids),
    )
