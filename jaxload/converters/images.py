"""LeRobot `image` cameras: one PNG or JPEG per frame inside the data parquet.

LeRobot (through HF `datasets`) stores such a column as `struct<bytes, path>` and decodes
it with Pillow; decoding with Pillow here gives exactly the pixels LeRobotDataset returns.
The converter then encodes them like any camera's frames (converters/video.py), so image
and video cameras share one record layout and one reader.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from jaxload.errors import SourceError


def image_frames(
    table: pa.Table,
    camera: str,
    size: tuple[int, int],
    *,
    where: str,
) -> Iterator[np.ndarray]:
    """Yields each row's image of `camera` as uint8 (H, W, 3) RGB, in row order.

    `size` is (height, width) from meta/info.json; a frame of another size, another
    channel layout, or bytes that do not decode raise SourceError naming `where` (the
    file and episode) and the frame.
    """
    column = table[camera].combine_chunks()
    if not pa.types.is_struct(column.type) or column.type.get_field_index("bytes") < 0:
        raise SourceError(
            f"{where}: image camera {camera!r} is stored as {column.type}, expected "
            "struct<bytes, path> (LeRobot's image column)"
        )
    for frame, blob in enumerate(column.field("bytes").to_pylist()):
        here = f"{where}, camera {camera!r}, frame {frame}"
        if blob is None:
            # Images referenced by path only exist while LeRobot records; published
            # datasets embed the bytes. Reading paths from metadata is not worth the risk
            # of reading outside the dataset.
            raise SourceError(f"{here}: image has no embedded bytes (stored by path only)")
        yield decode_image(blob, size, here)


def decode_image(blob: bytes, size: tuple[int, int], where: str) -> np.ndarray:
    """One PNG/JPEG as uint8 (H, W, 3), checked against the declared (height, width)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(blob)) as image:
            image.load()
            mode, array = image.mode, np.asarray(image)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise SourceError(f"{where}: image bytes do not decode ({e})") from e
    if mode != "RGB":
        # LeRobot would return this image with other channels than 3; converting it to RGB
        # here would change what the dataset holds.
        raise SourceError(f"{where}: image mode {mode}; jaxload converts RGB images only")
    if array.shape[:2] != tuple(size):
        raise SourceError(
            f"{where}: image is {array.shape[0]}x{array.shape[1]} but meta/info.json "
            f"declares {size[0]}x{size[1]}"
        )
    return array
