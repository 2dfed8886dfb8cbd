"""`ImageTransforms`: a sequence of image transform steps applied to a batch's cameras,
with the randomness of row r keyed by (seed, global position of r).

It runs in the loader's workers on numpy (`apply`), or on the devices after decode,
jitted over the global batch (`apply_jax`, used by jaxload.transforms.on_device); both
draw the same parameters (jaxload.transforms.keys) and differ only in pixel arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.transforms.base import ImageTransform, Params, Size
from jaxload.transforms.keys import uniforms

DTYPES = ("uint8", "float32")


class ImageTransforms:
    """Steps applied in order to every camera of a batch (or to `keys`), each batch row
    with random parameters keyed by (seed, its global position).

    Frames are uint8 (H, W, 3), or (T, H, W, 3) with a window, whose slots share the
    row's parameters. Output is uint8, or with `dtype="float32"` floats in [0, 1]. The
    cameras of a row draw independently (stream `"{camera}/{step index}"`).

    Example::

        augment = jaxload.ImageTransforms([
            jaxload.transforms.RandomResizedCrop((224, 224), scale=(0.8, 1.0)),
            jaxload.transforms.RandomRotation(5),
            jaxload.transforms.ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.05),
        ])
        loader = jaxload.make_loader(path, global_batch_size=64, seed=0, sharding=sharding,
                                     image_transforms=augment)  # on the workers' CPUs
        # the same pixels outside a loader, for rows at global positions 0..63:
        batch = augment.apply(numpy_batch, positions=np.arange(64), seed=0)
    """

    def __init__(
        self,
        transforms: Sequence[ImageTransform],
        *,
        keys: Sequence[str] | None = None,
        dtype: str = "uint8",
        stream_prefix: str = "",
    ):
        if isinstance(transforms, ImageTransform) or not isinstance(transforms, Sequence):
            raise TypeError(
                f"ImageTransforms takes a list of steps, got {type(transforms).__name__}"
            )
        for i, step in enumerate(transforms):
            if not isinstance(step, ImageTransform):
                hint = (
                    " (a class: instantiate it, e.g. Resize((224, 224)))"
                    if isinstance(step, type)
                    else ""
                )
                raise TypeError(
                    f"ImageTransforms step {i} is {step!r}{hint}: steps are jaxload.transforms "
                    "image transforms (Resize, RandomResizedCrop, ColorJitter, ...; torchvision "
                    "transforms are not keyed by position and are not accepted) or "
                    "subclasses of jaxload.transforms.ImageTransform"
                )
        if isinstance(keys, str):
            raise TypeError(f"keys must be a list of camera keys, got the string {keys!r}")
        if keys is not None and len(keys) == 0:
            raise ValueError(
                "ImageTransforms keys=[] transforms nothing; leave keys=None for every camera"
            )
        if dtype not in DTYPES:
            raise ValueError(f"ImageTransforms dtype must be one of {DTYPES}, got {dtype!r}")
        self.transforms = tuple(transforms)
        self.keys = None if keys is None else tuple(keys)
        self.dtype = dtype
        # Names the random streams: a loader's per-dataset transforms draw apart from its own.
        self.stream_prefix = str(stream_prefix)

    def __repr__(self) -> str:
        keys = "" if self.keys is None else f", keys={list(self.keys)}"
        dtype = "" if self.dtype == "uint8" else f", dtype={self.dtype!r}"
        return f"ImageTransforms({list(self.transforms)}{keys}{dtype})"

    def bound(self, keys: Sequence[str], stream_prefix: str | None = None) -> ImageTransforms:
        """These steps for `keys` (no checks; `resolved` checks), in `stream_prefix`'s streams."""
        prefix = self.stream_prefix if stream_prefix is None else stream_prefix
        return ImageTransforms(self.transforms, keys=keys, dtype=self.dtype, stream_prefix=prefix)

    # -- shapes ------------------------------------------------------------------------------

    def output_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """A camera's sample shape ((T,) H, W, 3) after the steps; ValueError if a step
        cannot apply (a crop larger than its input)."""
        size: Size = (int(shape[-3]), int(shape[-2]))
        for step in self.transforms:
            size = step.output_size(size)
        return (*tuple(shape[:-3]), *size, int(shape[-1]))

    def resolved(self, cameras: Mapping[str, Sequence[int]]) -> ImageTransforms:
        """These steps bound to camera keys ({key: sample shape}): every camera, or `keys`,
        which must all be cameras. Checks every step applies to every camera's size."""
        keys = list(cameras) if self.keys is None else list(self.keys)
        unknown = [k for k in keys if k not in cameras]
        if unknown:
            raise ValueError(
                f"image_transforms keys {unknown} are not cameras of the batch (cameras: "
                f"{sorted(cameras)})"
            )
        for key in keys:
            try:
                self.output_shape(cameras[key])
            except ValueError as e:
                raise ValueError(f"image_transforms on camera {key!r}: {e}") from None
        return self.bound(keys)

    # -- parameters ---------------------------------------------------------------------------

    def draw(
        self, key: str, positions: np.ndarray, seed: int, shape: Sequence[int]
    ) -> list[Params]:
        """Per-step parameters of camera `key` for rows at global `positions`."""
        positions = np.asarray(positions, dtype=np.int64)
        size: Size = (int(shape[-3]), int(shape[-2]))
        params = []
        for i, step in enumerate(self.transforms):
            u = uniforms(seed, positions, f"{self.stream_prefix}{key}/{i}", step.num_uniforms)
            params.append(step.draw(u, size))
            size = step.output_size(size)
        return params

    # -- numpy (CPU) --------------------------------------------------------------------------

    def apply(self, batch: Mapping[str, Any], positions: np.ndarray, seed: int) -> dict[str, Any]:
        """A copy of `batch` (numpy, rows at global `positions`) with its cameras transformed.

        Without `keys`, cameras are the uint8 arrays shaped (N, [T,] H, W, 3)."""
        out = dict(batch)
        for key in self._keys(batch):
            out[key] = self.apply_frames(key, batch[key], positions, seed)
        return out

    def apply_frames(self, key: str, frames: Any, positions: np.ndarray, seed: int) -> np.ndarray:
        """One camera's rows (N, [T,] H, W, 3) at global `positions`, transformed as `apply`
        transforms them: each row depends only on its frames, key, position and the seed, so
        any subset of a batch's rows transforms alone to the same pixels."""
        frames = np.asarray(frames)
        positions = np.asarray(positions)
        if len(frames) != len(positions):
            raise ValueError(
                f"ImageTransforms: {key!r} has {len(frames)} rows, positions {len(positions)}"
            )
        params = self.draw(key, positions, seed, frames.shape[1:])
        x = frames if frames.ndim == 5 else frames[:, None]
        for step, p in zip(self.transforms, params, strict=True):
            x = step.apply_numpy(x, p)
        x = x.reshape(len(frames), *self.output_shape(frames.shape[1:]))
        return x.astype(np.float32) * np.float32(1 / 255) if self.dtype == "float32" else x

    def _keys(self, batch: Mapping[str, Any]) -> list[str]:
        if self.keys is not None:
            missing = [k for k in self.keys if k not in batch]
            if missing:
                raise KeyError(
                    f"ImageTransforms: the batch has no {missing} (it has {sorted(batch)})"
                )
            return list(self.keys)
        return [k for k, v in batch.items() if _is_frames(v)]

    # -- JAX (devices) ------------------------------------------------------------------------

    def apply_jax(self, frames: Mapping[str, Any], params: Mapping[str, list]) -> dict[str, Any]:
        """Traceable: {key: (N, [T,] H, W, 3) uint8} and their `draw` parameters (as arrays)
        -> transformed frames. jaxload.transforms.on_device jits it over global batches."""
        import jax.numpy as jnp

        out = {}
        for key, value in frames.items():
            x = value.astype(jnp.float32)
            x = x if x.ndim == 5 else x[:, None]
            for step, p in zip(self.transforms, params[key], strict=True):
                x = step.apply_jax(x, p)
            x = x.reshape(value.shape[0], *self.output_shape(value.shape[1:]))
            if self.dtype == "float32":
                out[key] = jnp.clip(x, 0, 255) * (1 / 255)
            else:
                out[key] = jnp.clip(jnp.round(x), 0, 255).astype(jnp.uint8)
        return out


def as_image_transforms(value: Any) -> ImageTransforms | None:
    """make_loader's `image_transforms`: None, an ImageTransforms, or a list of steps."""
    if value is None or isinstance(value, ImageTransforms):
        return value
    if isinstance(value, ImageTransform):
        return ImageTransforms([value])
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ImageTransforms(value)
    raise TypeError(
        "image_transforms must be a jaxload.ImageTransforms or a list of image transform "
        f"steps, got {type(value).__name__}"
    )


def _is_frames(value: Any) -> bool:
    return (
        isinstance(value, np.ndarray)
        and value.dtype == np.uint8
        and value.ndim in (4, 5)
        and value.shape[-1] == 3
    )
