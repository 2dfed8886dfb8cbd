"""What an image transform is: a step with per-row random parameters and two
implementations of the same math, one on numpy (CPU, in the loader's workers) and one on
JAX (jitted over the global batch, on the devices).

Frames are (N, T, H, W, 3): N batch rows, T window slots (1 without a window). A step
draws its parameters per row from `count` uniforms of that row (jaxload.transforms.keys:
keyed by (seed, global position)); every slot of a row gets the same parameters, so a
window stays one consistent view over time. Parameters are drawn on the host in numpy,
by the same code for both implementations, so the two paths differ only in pixel
arithmetic (tested tolerance: docs/LOADER.md, "Image transforms").

A step of your own subclasses ImageTransform at module level (Grain workers unpickle it)
and implements `apply_numpy` and `apply_jax`, plus `num_uniforms`/`draw` when random and
`output_size` when it changes the frame size.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

Size = tuple[int, int]  # (height, width)
Params = dict[str, np.ndarray]


class ImageTransform:
    """One step of `jaxload.ImageTransforms`. Subclasses are small, picklable objects."""

    #: uniforms in [0, 1) this step needs per row (0: deterministic)
    num_uniforms: int = 0

    def output_size(self, size: Size) -> Size:
        """Frame size after this step for input `size`; raises ValueError if it cannot apply."""
        return size

    def draw(self, u: np.ndarray, size: Size) -> Params:
        """Per-row parameters from `u` (N, num_uniforms) for input frames of `size`."""
        return {}

    def apply_numpy(self, frames: np.ndarray, params: Params) -> np.ndarray:
        """(N, T, H, W, 3) uint8 -> (N, T, h, w, 3) uint8."""
        raise NotImplementedError

    def apply_jax(self, frames: Any, params: Mapping[str, Any]) -> Any:
        """(N, T, H, W, 3) float32 in [0, 255] -> (N, T, h, w, 3) float32, traceable."""
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self)))


def pair(name: str, value: Any, *, square_ok: bool = True) -> Size:
    """(height, width) from a pair of positive ints, or one int for a square."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and square_ok:
        value = (value, value)
    ok = (
        isinstance(value, tuple | list)
        and len(value) == 2
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value)
        and all(v > 0 for v in value)
    )
    if not ok:
        hint = "an int (a square) or " if square_ok else ""
        raise ValueError(
            f"{name}: size must be {hint}(height, width) of positive ints, got {value!r}"
        )
    return int(value[0]), int(value[1])


def interval(
    name: str, value: Any, *, center: float | None, low: float, high: float
) -> tuple[float, float]:
    """A (lo, hi) range within [low, high]: a pair, or (when `center` is given) a number v
    meaning [center - v, center + v], its low end clipped at `low`."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    pair_ok = (
        isinstance(value, tuple | list)
        and len(value) == 2
        and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)
        and all(np.isfinite(v) for v in value)
    )
    if number and center is not None and 0 <= value <= high - center:
        return max(low, center - value), center + float(value)
    if pair_ok and low <= value[0] <= value[1] <= high:
        return float(value[0]), float(value[1])
    rule = f"a pair (lo, hi) with {low:g} <= lo <= hi <= {high:g}"
    if center is not None:
        rule = f"a number v in [0, {high - center:g}] (meaning [{center:g} - v, {center:g} + v]) or {rule}"
    raise ValueError(f"{name} must be {rule}, got {value!r}")


def randint(u: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """Integers uniform in [0, count) from uniforms in [0, 1)."""
    return np.minimum(np.floor(u * count), np.asarray(count) - 1).astype(np.int64)
