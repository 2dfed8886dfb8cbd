"""Geometric image transforms: resize, resize with padding, crops, random resized crop,
rotation. Each has a numpy implementation (CPU) and a JAX one (devices) of the same map.

Resampling is bilinear with antialiasing when shrinking (a triangle filter widened by the
shrink factor, as PIL and torchvision resize): on CPU `torch.nn.functional.interpolate`
(its uint8 channels-last kernel: 0.14 ms per 480x640 -> 224x224 frame here, against
0.85 ms for torchcodec's decoder-side resize; benchmarks/RESULTS.md, "Image transforms"),
on devices `jax.image.resize`, and for per-row crops the same kernel as two
matrices per row (`crop_weights`). Rotation samples bilinearly with zeros
outside the frame: OpenCV's `warpAffine` on CPU, `jax.scipy.ndimage.map_coordinates` on
devices, given the same matrix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxload.transforms.base import ImageTransform, Params, Size, interval, pair, randint

# -- shared resampling helpers ----------------------------------------------------------------


def resize_numpy(frames: np.ndarray, size: Size) -> np.ndarray:
    """(M..., H, W, 3) uint8 -> (M..., h, w, 3) uint8, bilinear, antialiased when shrinking."""
    import torch

    lead, (height, width) = frames.shape[:-3], frames.shape[-3:-1]
    if (height, width) == tuple(size):
        return frames
    flat = np.ascontiguousarray(frames).reshape(-1, height, width, 3)
    x = torch.from_numpy(flat).permute(0, 3, 1, 2)  # NCHW view of channels-last memory
    y = torch.nn.functional.interpolate(
        x, size=tuple(size), mode="bilinear", antialias=True, align_corners=False
    )
    return y.permute(0, 2, 3, 1).contiguous().numpy().reshape(*lead, *size, 3)


def resize_jax(frames: Any, size: Size) -> Any:
    import jax

    if tuple(frames.shape[-3:-1]) == tuple(size):
        return frames
    shape = (*frames.shape[:-3], *size, frames.shape[-1])
    return jax.image.resize(frames, shape, "linear", antialias=True)


def _crop_numpy(frames: np.ndarray, top: np.ndarray, left: np.ndarray, size: Size) -> np.ndarray:
    h, w = size
    out = np.empty((*frames.shape[:2], h, w, 3), np.uint8)
    for n in range(len(frames)):
        out[n] = frames[n, :, top[n] : top[n] + h, left[n] : left[n] + w]
    return out


def _crop_jax(frames: Any, top: Any, left: Any, size: Size) -> Any:
    import jax

    def one(x, t, l):  # noqa: E741
        return jax.lax.dynamic_slice(x, (0, t, l, 0), (x.shape[0], *size, x.shape[-1]))

    return jax.vmap(one)(frames, top, left)


# -- transforms -------------------------------------------------------------------------------


class Resize(ImageTransform):
    """Resize every frame to `size` = (height, width), bilinear, antialiased when shrinking.

    An int is refused: torchvision reads it as the shorter edge, others as a square; say
    which with (height, width), or keep the aspect ratio with `ResizeWithPad`.
    """

    def __init__(self, size: Size):
        self.size = pair("Resize", size, square_ok=False)

    def output_size(self, size: Size) -> Size:
        return self.size

    def apply_numpy(self, frames: np.ndarray, params: Params) -> np.ndarray:
        return resize_numpy(frames, self.size)

    def apply_jax(self, frames: Any, params: Mapping[str, Any]) -> Any:
        return resize_jax(frames, self.size)


class ResizeWithPad(ImageTransform):
    """Resize keeping the aspect ratio to fit `size`, then pad with black to `size`,
    centered (openpi's `resize_with_pad`: inner size `int(side / ratio)`, padding split
    with the odd pixel at the bottom/right)."""

    def __init__(self, size: Size | int):
        self.size = pair("ResizeWithPad", size)

    def output_size(self, size: Size) -> Size:
        return self.size

    def _inner(self, size: Size) -> tuple[Size, Size]:
        (height, width), (th, tw) = size, self.size
        ratio = max(width / tw, height / th)
        inner = (max(1, int(height / ratio)), max(1, int(width / ratio)))
        return inner, ((th - inner[0]) // 2, (tw - inner[1]) // 2)

    def apply_numpy(self, frames: np.ndarray, params: Params) -> np.ndarray:
        (ih, iw), (top, left) = self._inner(frames.shape[-3:-1])
        out = np.zeros((*frames.shape[:-3], *self.size, 3), np.uint8)
        out[..., top : top + ih, left : left + iw, :] = resize_numpy(frames, (ih, iw))
        return out

    def apply_jax(self, frames: Any, params: Mapping[str, Any]) -> Any:
        import jax.numpy as jnp

        (ih, iw), (top, left) = self._inner(frames.shape[-3:-1])
        inner = resize_jax(frames, (ih, iw))
        pads = [(0, 0)] * (frames.ndim - 3)
        pads += [(top, self.size[0] - ih - top), (left, self.size[1] - iw - left), (0, 0)]
        return jnp.pad(inner, pads)


class CenterCrop(ImageTransform):
    """The central `size` = (height, width) (or an int: a square) of every frame."""

    def __init__(self, size: Size | int):
        self.size = pair("CenterCrop", size)

    def output_size(self, size: Size) -> Size:
        return _fits(self, size)

    def _corner(self, size: Size) -> Size:
        return round((size[0] - self.size[0]) / 2), round((size[1] - self.size[1]) / 2)

    def apply_numpy(self, frames: np.ndarray, params: Params) -> np.ndarray:
        top, left = self._corner(frames.shape[-3:-1])
        return np.ascontiguousarray(
            frames[..., top : top + self.size[0], left : left + self.size[1], :]
        )

    def apply_jax(self, frames: Any, params: Mapping[str, Any]) -> Any:
        top, left = self._corner(frames.shape[-3:-1])
        return frames[..., top : top + self.size[0], left : left + self.size[1], :]


class RandomCrop(ImageTransform):
    """A `size` = (height, width) (or int) crop at a uniformly random place of the frame."""

    num_uniforms = 2

    def __init__(self, size: Size | int):
        self.size = pair("RandomCrop", size)

    def output_size(self, size: Size) -> Size:
        return _fits(self, size)

    def draw(self, u: np.ndarray, size: Size) -> Params:
        top = randint(u[:, 0], size[0] - self.size[0] + 1)
        left = randint(u[:, 1], size[1] - self.size[1] + 1)
        return {"top": top.astype(np.int32), "left": left.astype(np.int32)}

    def apply_numpy(self, frames: np.ndarray, params: Params) -> np.ndarray:
        return _crop_numpy(frames, params["top"], params["left"], self.size)

    def apply_jax(self, frames: Any, params: Mapping[str, Any]) -> Any:
        return _crop_jax(frames, params["top"], params["left"], self.size)


class RandomResizedCrop(ImageTransform):
    """A random box of the frame resized to `size` (torchvision's RandomResizedCrop): area
    a uniform fraction in `scale` of the frame's, aspect ratio log-uniform in `ratio`,
    position uniform; 10 tries, then the largest centered box within `ratio`."""

    TRIES = 10
    num_uniforms = 4 * TRIES

    def __init__(
        self,
        size: Size | int,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ):
        self.size = pair("RandomResizedCrop", size)
        self.scale = interval("RandomResizedCrop scale", scale, center=None, low=0.0, high=1.0)
        self.ratio = interval("RandomResizedCrop ratio", ratio, center=None, low=1e-6, high=1e6)
        if self.scale[1] <= 0:
            raise ValueError(f"RandomResizedCrop scale must allow an area > 0, got {scale!r}")

    def output_size(self, size: Size) -> Size:
        return self.size

    def draw(self, u: np.ndarray, size: Size) -> Params:
        height, width = size
        n = len(u)
        u = u.reshape(n, self.TRIES, 4)
        area = height * width * (self.scale[0] + u[..., 0] * (self.scale[1] - self.scale[0]))
        lo, hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = np.exp(lo + u[..., 1] * (hi - lo))
        w = np.round(np.sqrt(area * aspect)).astype(np.int64)
        h = np.round(np.sqrt(area / aspect)).astype(np.int64)
        ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        first = np.argmax(ok, axis=1)  # the first try that fits
        pick = np.arange(n), first
        h, w = h[pick], w[pick]
        top = randint(u[pick][:, 2], height - h + 1)
        left = randint(u[pick][:, 3], width - w + 1)
        # No try fitted: the whole frame cut to the nearest allowed ratio, centered.
        none = ~ok.any(axis=1)
        fh, fw = self._fallback(size)
        h[none], w[none] = fh, fw
        top[none], left[none] = (height - fh) // 2, (width - fw) // 2
        return {
            k: v.astype(np.int32) for k, v in dict(top=top, left=left, height=h, width=w).items()
        }

    def _fallback(self, size: Size) -> Size:
        height, width = size
        frame_ratio = width / height
        if frame_ratio < self.ratio[0]:
            return round(width / self.ratio[0]), width
        if frame_ratio > self.ratio[1]:
            return height, round(height * self.ratio[1])
        return height, width

    def apply_numpy(self, frames: np.ndarray, params: Params) -> np.ndarray:
        out = np.empty((*frames.shape[:2], *self.size, 3), np.uint8)
        for n in range(len(frames)):
            t, l, h, w = (int(params[k][n]) for k in ("top", "left", "height", "width"))  # noqa: E741
            out[n] = resize_numpy(frames[n, :, t : t + h, l : l + w], self.size)
        return out

    def apply_jax(self, frames: Any, params: Mapping[str, Any]) -> Any:
        import jax.numpy as jnp

        p = params
        rows = crop_weights(self.size[0], frames.shape[2], p["top"], p["height"])
        cols = crop_weights(self.size[1], frames.shape[3], p["left"], p["width"])
        x = jnp.einsum("nyh,nthwc->ntywc", rows, frames)
        return jnp.einsum("nxw,ntywc->ntyxc", cols, x)


def crop_weights(out_size: int, in_size: int, start: Any, length: Any) -> Any:
    """(N, out_size, in_size) resampling weights of the crops [start, start + length) of
    an axis to `out_size`: bilinear, antialiased when shrinking, renormalized at the
    crop's edges. The CPU path's kernel (torch's, PIL's) applied to the crop alone, as a
    matrix (jax.image.scale_and_translate would read pixels beyond the crop's edges).
    """
    import jax.numpy as jnp

    start = jnp.asarray(start, jnp.float32)[:, None, None]
    length = jnp.asarray(length, jnp.float32)[:, None, None]
    scale = length / out_size  # input pixels per output pixel
    center = (jnp.arange(out_size, dtype=jnp.float32)[None, :, None] + 0.5) * scale
    j = jnp.arange(in_size, dtype=jnp.float32)[None, None, :] - start
    weights = jnp.maximum(0.0, 1.0 - jnp.abs(j + 0.5 - center) / jnp.maximum(scale, 1.0))
    weights = jnp.where((j >= 0) & (j < length), weights, 0.0)
    return weights / weights.sum(axis=-1, keepdims=True)


class RandomRotation(ImageTransform):
    """Rotate by an angle uniform in `degrees` (a number d: [-d, d]; counter-clockwise
    positive) about the frame's center, bilinear, black outside the frame."""

    num_uniforms = 1

    def __init__(self, degrees: float | tuple[float, float]):
        self.degrees = interval(
            "RandomRotation degrees", degrees, center=0.0, low=-180.0, high=180.0
        )

    def draw(self, u: np.ndarray, size: Size) -> Params:
        angle = np.deg2rad(self.degrees[0] + u[:, 0] * (self.degrees[1] - self.degrees[0]))
        cy, cx = (size[0] - 1) / 2, (size[1] - 1) / 2
        cos, sin = np.cos(angle), np.sin(angle)
        # Output pixel (x, y) samples the input at inverse @ (x, y, 1) (y down, so a
        # positive angle turns the picture counter-clockwise, as OpenCV and torchvision).
        inverse = np.stack(
            [
                np.stack([cos, -sin, (1 - cos) * cx + sin * cy], -1),
                np.stack([sin, cos, -sin * cx + (1 - cos) * cy], -1),
            ],
            1,
        )
        return {"inverse": inverse.astype(np.float32)}

    def apply_numpy(self, frames: np.ndarray, params: Params) -> np.ndarray:
        import cv2

        height, width = frames.shape[-3:-1]
        out = np.empty_like(frames)
        flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
        for n in range(len(frames)):
            matrix = params["inverse"][n].astype(np.float64)
            for t in range(frames.shape[1]):
                cv2.warpAffine(
                    frames[n, t],
                    matrix,
                    (width, height),
                    dst=out[n, t],
                    flags=flags,
                    borderMode=cv2.BORDER_CONSTANT,
                    borderValue=0,
                )
        return out

    def apply_jax(self, frames: Any, params: Mapping[str, Any]) -> Any:
        import jax
        import jax.numpy as jnp
        from jax.scipy.ndimage import map_coordinates

        slots, height, width, channels = frames.shape[1:]
        t, y, x, c = jnp.meshgrid(
            *(jnp.arange(s, dtype=jnp.float32) for s in (slots, height, width, channels)),
            indexing="ij",
        )

        def one(image, m):
            sx = m[0, 0] * x + m[0, 1] * y + m[0, 2]
            sy = m[1, 0] * x + m[1, 1] * y + m[1, 2]
            return map_coordinates(image, [t, sy, sx, c], order=1, mode="constant", cval=0.0)

        return jax.vmap(one)(frames, params["inverse"])


def _fits(step: ImageTransform, size: Size) -> Size:
    if step.size[0] > size[0] or step.size[1] > size[1]:
        raise ValueError(
            f"{type(step).__name__}{step.size} is larger than the {size[0]}x{size[1]} frames "
            "it gets (resize first, or crop less)"
        )
    return step.size
