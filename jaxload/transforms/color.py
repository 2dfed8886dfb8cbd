"""Colour jitter as one affine colour map per frame.

Brightness, saturation and hue rotation are linear maps of RGB and contrast is affine
(around the frame's mean luma), so a jitter is one 3x3 matrix plus an offset per frame:
one pass over the pixels (OpenCV's `cv2.transform` on CPU, an einsum on devices) instead
of torchvision's four passes through float HSV. The matrices are those of the W3C
Filter Effects spec (`brightness`, `contrast`, `saturate`, `hue-rotate`), with Rec. 709
luma weights; the result is clipped to [0, 255] once, at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxload.transforms.base import ImageTransform, Params, interval

LUMA = np.array([0.2126, 0.7152, 0.0722])  # Rec. 709, as W3C's saturate and hue-rotate


def saturation_matrix(s: np.ndarray) -> np.ndarray:
    """(N, 3, 3): s * I + (1 - s) * (each channel -> luma); s=0 grey, 1 unchanged."""
    eye, grey = np.eye(3), np.broadcast_to(LUMA, (3, 3))
    return s[:, None, None] * eye + (1 - s)[:, None, None] * grey


def hue_matrix(turns: np.ndarray) -> np.ndarray:
    """(N, 3, 3): W3C `hue-rotate` by `turns` of a full circle (0.5 = 180 degrees)."""
    angle = 2 * np.pi * turns
    cos, sin = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    base = np.broadcast_to(LUMA, (3, 3))
    a = np.array([[0.787, -0.715, -0.072], [-0.213, 0.285, -0.072], [-0.213, -0.715, 0.928]])
    b = np.array([[-0.213, -0.715, 0.928], [0.143, 0.140, -0.283], [-0.787, 0.715, 0.072]])
    return base + cos * a + sin * b


class ColorJitter(ImageTransform):
    """Random brightness, contrast, saturation and hue, applied in that order.

    `brightness`, `contrast`, `saturation`: a number v draws a factor uniformly in
    [max(0, 1 - v), 1 + v], a pair (lo, hi) in [lo, hi]; 1 leaves the frame unchanged.
    `hue`: a number h <= 0.5 draws a rotation in [-h, h] turns, a pair within [-0.5, 0.5].
    Contrast scales around the frame's mean luma (as torchvision), so a window's frames
    share the factors but each keeps its own mean.
    """

    num_uniforms = 4

    def __init__(
        self,
        brightness: float | tuple[float, float] = 0.0,
        contrast: float | tuple[float, float] = 0.0,
        saturation: float | tuple[float, float] = 0.0,
        hue: float | tuple[float, float] = 0.0,
    ):
        big = float(np.finfo(np.float32).max)
        self.brightness = interval(
            "ColorJitter brightness", brightness, center=1.0, low=0.0, high=big
        )
        self.contrast = interval("ColorJitter contrast", contrast, center=1.0, low=0.0, high=big)
        self.saturation = interval(
            "ColorJitter saturation", saturation, center=1.0, low=0.0, high=big
        )
        self.hue = interval("ColorJitter hue", hue, center=0.0, low=-0.5, high=0.5)

    def draw(self, u: np.ndarray, size: tuple[int, int]) -> Params:
        def pick(i, lo_hi):
            return lo_hi[0] + u[:, i] * (lo_hi[1] - lo_hi[0])

        b, c = pick(0, self.brightness), pick(1, self.contrast)
        s, h = pick(2, self.saturation), pick(3, self.hue)
        linear = hue_matrix(h) @ saturation_matrix(s) * (b * c)[:, None, None]
        # contrast's offset: (1 - c) * (mean luma after brightness) on every channel (the
        # saturation and hue matrices keep grey grey, so it passes them unchanged)
        return {"matrix": linear.astype(np.float32), "offset": ((1 - c) * b).astype(np.float32)}

    def apply_numpy(self, frames: np.ndarray, params: Params) -> np.ndarray:
        import cv2

        out = np.empty_like(frames)
        affine = np.zeros((3, 4))
        for n in range(len(frames)):
            affine[:, :3] = params["matrix"][n]
            for t in range(frames.shape[1]):
                frame = frames[n, t]
                mean_luma = float(np.dot(cv2.mean(frame)[:3], LUMA))
                affine[:, 3] = params["offset"][n] * mean_luma
                out[n, t] = cv2.transform(frame, affine)
        return out

    def apply_jax(self, frames: Any, params: Mapping[str, Any]) -> Any:
        import jax.numpy as jnp

        luma = jnp.asarray(LUMA, jnp.float32)
        mean_luma = jnp.einsum("nthwc,c->nt", frames, luma) / (frames.shape[2] * frames.shape[3])
        out = jnp.einsum("nthwc,ndc->nthwd", frames, params["matrix"])
        offset = params["offset"][:, None] * mean_luma
        return out + offset[:, :, None, None, None]
