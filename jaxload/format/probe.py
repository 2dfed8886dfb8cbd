"""meta/info.json checked against the records at open, on the first episode's records.

The first frame block and each camera's init segment of the dataset's first episode are
read (one batched read, verified like every read: their checksums are keyed by the content
and the metadata, `jaxload.format.sealing`), then compared with what info.json says they
hold: the frame rows' size (`features`), and each camera's codec and frame size
(`cameras.<key>.codec`, `.width`, `.height`). A mismatch is a DatasetError naming
info.json and the field, at open, instead of a raw numpy or decoder error on the first
batch; a shard of another conversion fails here too (`CorruptRecordError`).

    check_first_records(files)   # files: jaxload.format.reader.DatasetFiles
"""

from __future__ import annotations

from typing import Any

from jaxload.errors import DatasetError
from jaxload.format import layout
from jaxload.format.mp4 import sample_entry

# The sample entries each stored codec family is written with (FFmpeg's mp4 muxer).
SAMPLE_ENTRIES = {"h264": ("avc1", "avc3"), "hevc": ("hvc1", "hev1"), "av1": ("av01",)}


def check_first_records(files: Any) -> None:
    """Raises a DatasetError naming meta/info.json and the field when the first episode's
    records do not hold what it describes (module docstring). `files`: a DatasetFiles."""
    info, ep = files.info, files.episodes
    if not len(ep):
        return
    where = files.storage.where(layout.INFO_PATH)
    cameras = sorted(info.cameras)
    shard, length = int(ep.shard[0]), int(ep.length[0])
    wanted = [int(ep.frames_record_start[0])] + [int(ep.record_start[c][0]) for c in cameras]
    block, *inits = files.readers.read(shard, wanted)
    frames, itemsize = min(length, layout.FRAMES_PER_BLOCK), info.frame_dtype.itemsize
    if len(block) != frames * itemsize:
        raise DatasetError(
            f"{where}: features describe frame rows of {itemsize} bytes, but the first "
            f"{frames} frames of {ep.where(0)} are stored in {len(block)} bytes: a feature's "
            "dtype or shape was edited after conversion; restore info.json or reconvert"
        )
    for cam, init in zip(cameras, inits, strict=True):
        camera = info.cameras[cam]
        try:
            kind, width, height = sample_entry(init)
        except ValueError as e:
            raise DatasetError(
                f"{ep.where(0)}, camera {cam}: the init segment does not parse ({e})"
            ) from e
        family = camera.codec.split("-")[0].removesuffix("rgb")
        if kind not in SAMPLE_ENTRIES.get(family, (kind,)):
            raise DatasetError(
                f"{where}: cameras.{cam}.codec is {camera.codec!r}, but its records hold "
                f"{kind!r} video ({ep.where(0)}); restore info.json or reconvert"
            )
        if (width, height) != (camera.width, camera.height):
            field = "width" if width != camera.width else "height"
            raise DatasetError(
                f"{where}: cameras.{cam}.{field} is {getattr(camera, field)}, but its records "
                f"hold {width}x{height} frames ({ep.where(0)}); restore info.json or reconvert"
            )
