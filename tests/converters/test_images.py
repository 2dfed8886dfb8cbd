"""converters/images.py: LeRobot `image` cameras decoded with Pillow, as LeRobotDataset
does; a frame of another size or mode, bytes that do not decode, a path-only image or
another column type are refused naming file, episode, camera and frame."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from jaxload.converters.images import image_frames
from jaxload.errors import SourceError


def _png(array, mode=None):
    out = io.BytesIO()
    Image.fromarray(array, mode).save(out, format="PNG")
    return out.getvalue()


def _table(blobs):
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    return pa.table({"cam": pa.array([{"bytes": b, "path": None} for b in blobs], struct)})


def test_frames_decode_to_the_exact_pixels():
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (4, 6, 3), dtype=np.uint8) for _ in range(3)]
    got = list(image_frames(_table([_png(f) for f in frames]), "cam", (4, 6), where="f.parquet"))
    assert all(np.array_equal(a, b) for a, b in zip(got, frames)) and len(got) == 3


def test_bad_frames_are_named():
    rgb = np.zeros((4, 6, 3), np.uint8)
    cases = [
        (
            [_png(rgb), _png(np.zeros((4, 5, 3), np.uint8))],
            r"frame 1: image is 4x5 but meta/info\.json declares 4x6",
        ),
        (
            [_png(np.zeros((4, 6), np.uint8))],
            "frame 0: image mode L; jaxload converts RGB images only",
        ),
        ([b"\x89PNG broken"], "frame 0: image bytes do not decode"),
        ([None], r"frame 0: image has no embedded bytes \(stored by path only\)"),
    ]
    for blobs, message in cases:
        with pytest.raises(SourceError, match=rf"^f\.parquet: episode 2, camera 'cam', {message}"):
            list(image_frames(_table(blobs), "cam", (4, 6), where="f.parquet: episode 2"))
    with pytest.raises(
        SourceError, match=r"image camera 'cam' is stored as binary, expected struct<bytes, path>"
    ):
        list(image_frames(pa.table({"cam": pa.array([b"x"])}), "cam", (4, 6), where="f"))
