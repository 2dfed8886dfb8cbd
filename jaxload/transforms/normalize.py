"""Sample and batch transforms for the loader pipeline: normalization and its inverse.

`Normalize` is a picklable Grain `MapTransform` (it runs inside Grain worker processes)
and a plain callable, so it serves as `make_loader(..., batch_transform=...)`, in a Grain
`.map(...)` over samples or batches, inside a jitted step on the devices, or on a policy's
output to unnormalize actions. With one stats dict per dataset of a mixture it normalizes
each row with its own dataset's stats, chosen by the row's `dataset_index`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from jaxload.stats import FeatureStats

# mode -> the stats that map to [-1, 1] (or the mean and std of a z-score)
MODES = {"mean_std": ("mean", "std"), "quantile": ("q01", "q99"), "min_max": ("min", "max")}


class Normalize(grain.transforms.Map):
    """Per-key normalization: z-score (`"mean_std"`), or q01/q99 (`"quantile"`) or min/max
    (`"min_max"`) mapped onto [-1, 1]; `unnormalize` inverts it (for predicted actions).

    Formulas (LeRobot's): mean_std `(x - mean) / (std + eps)`; quantile and min_max
    `2 (x - lo) / (hi - lo + eps) - 1`. Values outside [lo, hi] map outside [-1, 1] (no
    clipping, so the inverse is exact). Works on a sample or a batch, numpy or jax arrays:
    the stats broadcast over leading (batch, time) axes. Normalized keys come out float32.
    Images (uint8, H W C) are scaled to [0, 1] first, as LeRobot's image stats are; their
    stats of shape (C, 1, 1) apply per channel. A vector zero-padded by a mixture
    (`{key}_dim_is_pad`) keeps its padded dims unchanged. Keys absent from an element
    are skipped.

    Per dataset: `stats` as a list with one stats dict per dataset of a mixture (in the
    loader's order; `from_datasets(..., per_dataset=True)`) normalizes each row with its
    dataset's stats, picked by the element's `dataset_index` (a mixture's batches hold it),
    on numpy or inside `jax.jit`; a dataset without stats for a key, and a dataset's padded
    dimensions, pass unchanged.

    Example:
        >>> stats = jaxload.stats.load_stats("out/demo")
        >>> norm = Normalize(stats, {"observation.state": "mean_std", "action": "quantile"})
        >>> loader = jaxload.make_loader("out/demo", global_batch_size=4, batch_transform=norm,
        ...                              options=jaxload.PipelineOptions(num_workers=0),
        ...                              host_index=0, host_count=1)
        >>> batch = next(loader)
        >>> batch["observation.state"].dtype, batch["action"].shape
        (dtype('float32'), (4, 4))
        >>> restored = norm.unnormalize({"action": batch["action"]})["action"]
        >>> loader.close()
    """

    def __init__(
        self,
        stats: Mapping[str, FeatureStats | Mapping[str, Any]]
        | Sequence[Mapping[str, FeatureStats | Mapping[str, Any]]],
        modes: Mapping[str, str],
        *,
        eps: float = 1e-8,
    ):
        self.modes = dict(modes)
        self.eps = float(eps)
        per_dataset = not isinstance(stats, Mapping)
        parts = list(stats) if per_dataset else [stats]
        # key -> (center, scale): trailing sample shape, or (datasets, *shape) per dataset
        self._params: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.per_dataset = per_dataset
        for key, mode in self.modes.items():
            if mode not in MODES:
                raise ValueError(
                    f"Normalize: mode {mode!r} for {key!r}; choose one of {list(MODES)}"
                )
            have = [part.get(key) for part in parts]
            if all(entry is None for entry in have):
                known = sorted({k for part in parts for k in part})
                raise KeyError(f"Normalize: no stats for {key!r} (stats have {known})")
            params = [
                None if e is None else _center_scale(_as_stats(e, key), mode, self.eps, key)
                for e in have
            ]
            self._params[key] = _stacked(params, key) if per_dataset else params[0]

    @classmethod
    def from_datasets(
        cls,
        paths_or_sources: Any,
        modes: Mapping[str, str],
        *,
        per_dataset: bool = False,
        key_maps: Sequence[Mapping[str, str | None]] | None = None,
        **kwargs: Any,
    ) -> Normalize:
        """Normalize with the stats of what a loader reads: one dataset, or a mixture,
        pooled (count-weighted) or `per_dataset` (each row by its own dataset's stats).

        Args:
            paths_or_sources: what make_loader takes: a path or URL, a
                `jaxload.DatasetSource` (its `cameras` and `key_map` rename the stats'
                keys as they rename the batch's), a dataset opened with `jaxload.open`, or
                a list of them, in the loader's order.
            modes: {batch key: "mean_std" | "quantile" | "min_max"}.
            per_dataset: one set of stats per dataset, applied per row by
                `dataset_index`; False pools them (a vector of several sizes is pooled per
                dimension over the datasets that have it).
            key_maps: make_loader's `key_maps` shorthand, if the loader was given one.
            **kwargs: `eps`.

        Only the keys of `modes` are read and merged (a mixture's other keys, such as image
        stats without a quantile sketch, raise no warning); a key is used from the datasets
        that have it, and one that none has is a KeyError naming the datasets.

        Example::

            sources = [jaxload.DatasetSource("out/a"), jaxload.DatasetSource("out/b")]
            norm = Normalize.from_datasets(sources, {"action": "mean_std"}, per_dataset=True)
            loader = jaxload.make_loader(sources, global_batch_size=64, batch_transform=norm)
        """
        from jaxload.transforms.mixture_stats import merge_padded, source_stats

        names, parts = source_stats(paths_or_sources, modes, key_maps)
        missing = [k for k in modes if not any(k in part for part in parts)]
        if missing:
            every = source_stats(paths_or_sources, None, key_maps, sketch=False)[1]
            have = sorted({k for part in every for k in part})
            raise KeyError(
                f"Normalize.from_datasets: no stats for {missing} in {', '.join(names)} "
                f"(their meta/stats.json have {have})"
            )
        return cls(parts if per_dataset else merge_padded(parts), modes, **kwargs)

    def map(self, element: dict[str, Any]) -> dict[str, Any]:
        return self.normalize(element)

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        return self.normalize(element)

    def normalize(self, element: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of `element` with every configured key normalized."""
        out = dict(element)
        for key in self._params:
            if key in out:
                x = out[key]
                if getattr(x, "dtype", None) == np.uint8:
                    x = x.astype(np.float32) / np.float32(255.0)
                center, scale = self._fitted(key, x, element)
                out[key] = (x.astype(np.float32) - center) / scale
        return out

    def _fitted(self, key: str, x: Any, element: Mapping[str, Any]) -> tuple[Any, Any]:
        """(center, scale) broadcasting against `x`: per row by `dataset_index` when
        per dataset (numpy, or jax arrays inside a jitted step)."""
        center, scale = _fit(*self._params[key], x, key, self.per_dataset)
        if not self.per_dataset:
            return center, scale
        index = element.get("dataset_index")
        if index is None:
            if len(center) > 1:
                raise KeyError(
                    f"Normalize per dataset: the element has no 'dataset_index' to pick each "
                    f"row's stats of {key!r} ({len(center)} datasets); a mixture's batches hold "
                    "it by default (with keys=..., name it)"
                )
            return center[0], scale[0]
        if not isinstance(index, np.ndarray | np.integer | int):
            import jax.numpy as jnp  # a jax array: gather on the devices

            center, scale = jnp.asarray(center), jnp.asarray(scale)
        trailing = center.ndim - 1
        shape = (*np.shape(index), *(1,) * (x.ndim - np.ndim(index) - trailing), *center.shape[1:])
        return center[index].reshape(shape), scale[index].reshape(shape)

    def unnormalize(
        self, element: Mapping[str, Any], keys: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """A copy of `element` with `keys` (default: every configured key present) mapped
        back to data units (images stay in [0, 1] floats)."""
        out = dict(element)
        for key in self._params if keys is None else keys:
            if key not in self._params:
                raise KeyError(f"Normalize.unnormalize: {key!r} is not normalized here")
            if key in out:
                center, scale = self._fitted(key, out[key], element)
                out[key] = out[key].astype(np.float32) * scale + center
        return out

    def __repr__(self) -> str:
        per = ", per dataset" if self.per_dataset else ""
        return f"Normalize({self.modes}{per})"


def _as_stats(entry: FeatureStats | Mapping[str, Any], key: str) -> FeatureStats:
    """The stats of `key`, checked (finite, std >= 0): a NaN or inf would
    otherwise be in every normalized batch."""
    stats = (
        entry
        if isinstance(entry, FeatureStats)
        else FeatureStats.from_json(entry, f"stats of {key!r}")
    )
    stats.check(f"Normalize: stats of {key!r}")
    return stats


def _stacked(
    params: list[tuple[np.ndarray, np.ndarray] | None], key: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per-dataset (center, scale) stacked into (datasets, *shape): vectors padded to the
    widest with the identity, datasets without stats the identity."""
    shapes = {c.shape for c, _ in filter(None, params)}
    ranks = {len(s) for s in shapes}
    if len(ranks) > 1 or (len(shapes) > 1 and ranks != {1}):
        raise ValueError(
            f"Normalize: stats of {key!r} have shapes {sorted(shapes)} across datasets"
        )
    shape = max(shapes)
    center = np.zeros((len(params), *shape), np.float32)
    scale = np.ones((len(params), *shape), np.float32)
    for d, p in enumerate(params):
        if p is not None:
            width = p[0].shape[-1] if p[0].ndim else None
            where = (d, slice(0, width)) if width is not None else (d,)
            center[where], scale[where] = p
    return center, scale


def _center_scale(
    stats: FeatureStats, mode: str, eps: float, key: str
) -> tuple[np.ndarray, np.ndarray]:
    """(center, scale) with normalized = (x - center) / scale, in float32, shaped to
    broadcast over a sample's trailing axes."""
    lo_name, hi_name = MODES[mode]
    try:
        lo, hi = stats.get(lo_name), stats.get(hi_name)
    except KeyError:
        raise KeyError(f"Normalize: stats of {key!r} have no {lo_name}/{hi_name}") from None
    if mode == "mean_std":
        center, scale = lo, hi + eps
    else:
        scale = (hi - lo + eps) / 2
        center = lo + scale
    return _trailing(center), _trailing(scale)


def _trailing(a: np.ndarray) -> np.ndarray:
    """LeRobot's stats shapes to sample shapes: (1,) -> scalar, (C, 1, 1) -> (C,) (HWC)."""
    a = np.asarray(a, dtype=np.float64)
    if a.size == 1:
        a = a.reshape(())
    elif a.ndim == 3 and a.shape[1:] == (1, 1):
        a = a.reshape(-1)
    return a.astype(np.float32)


def _fit(
    center: np.ndarray, scale: np.ndarray, x: Any, key: str, stacked: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Stats padded with the identity where a mixture zero-padded the vector's last axis
    (`stacked`: the first axis is the dataset's)."""
    if center.ndim == int(stacked):
        return center, scale
    size, have = x.shape[-1] if x.ndim else 0, center.shape[-1]
    if size == have:
        return center, scale
    if size < have:
        raise ValueError(
            f"Normalize: {key!r} has {size} values on its last axis, stats have {have}"
        )
    pad = [(0, 0)] * (center.ndim - 1) + [(0, size - have)]
    return np.pad(center, pad), np.pad(scale, pad, constant_values=1.0)
