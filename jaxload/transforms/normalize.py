"""Sample and batch transforms for the loader pipeline: normalization and its inverse.

`Normalize` is a picklable Grain `MapTransform` (it runs inside Grain worker processes)
and a plain callable, so it serves as `make_loader(..., batch_transform=...)`, in a Grain
`.map(...)` over samples or batches, or on a policy's output to unnormalize actions.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from jaxload.stats import FeatureStats, load_stats, merge_stats

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
        stats: Mapping[str, FeatureStats | Mapping[str, Any]],
        modes: Mapping[str, str],
        *,
        eps: float = 1e-8,
    ):
        self.modes = dict(modes)
        self.eps = float(eps)
        self._params: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for key, mode in self.modes.items():
            if mode not in MODES:
                raise ValueError(
                    f"Normalize: mode {mode!r} for {key!r}; choose one of {list(MODES)}"
                )
            if key not in stats:
                raise KeyError(f"Normalize: no stats for {key!r} (stats have {sorted(stats)})")
            entry = stats[key]
            if not isinstance(entry, FeatureStats):
                entry = FeatureStats.from_json(entry, f"stats of {key!r}")
            self._params[key] = _center_scale(entry, mode, self.eps, key)

    @classmethod
    def from_datasets(
        cls,
        paths: str | os.PathLike | Sequence[str | os.PathLike],
        modes: Mapping[str, str],
        **kwargs: Any,
    ) -> Normalize:
        """Normalize with the stats of one dataset, or of a mixture (merged, count-weighted).

        Only the keys of `modes` are read and merged (a mixture's other keys, such as
        image stats without a quantile sketch, raise no warning); a key is merged over the
        datasets that have it, and one that none has is a KeyError naming the datasets.

        Example::

            norm = Normalize.from_datasets(["out/a", "out/b"], {"action": "mean_std"})
        """
        paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        parts = [load_stats(p, modes) for p in paths]
        missing = [k for k in modes if not any(k in part for part in parts)]
        if missing:
            have = sorted({k for p in paths for k in load_stats(p, sketch=False)})
            raise KeyError(
                f"Normalize.from_datasets: no stats for {missing} in "
                f"{', '.join(map(str, paths))} (their meta/stats.json have {have})"
            )
        return cls(merge_stats(parts), modes, **kwargs)

    def map(self, element: dict[str, Any]) -> dict[str, Any]:
        return self.normalize(element)

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        return self.normalize(element)

    def normalize(self, element: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of `element` with every configured key normalized."""
        out = dict(element)
        for key, (center, scale) in self._params.items():
            if key in out:
                x = out[key]
                if getattr(x, "dtype", None) == np.uint8:
                    x = x.astype(np.float32) / np.float32(255.0)
                center_, scale_ = _fit(center, scale, x, key)
                out[key] = (x.astype(np.float32) - center_) / scale_
        return out

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
                center, scale = _fit(*self._params[key], out[key], key)
                out[key] = out[key].astype(np.float32) * scale + center
        return out

    def __repr__(self) -> str:
        return f"Normalize({self.modes})"


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


def _fit(center: np.ndarray, scale: np.ndarray, x: Any, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Stats padded with the identity where a mixture zero-padded the vector's last axis."""
    if center.ndim == 0:
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
