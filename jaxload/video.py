"""Stored video: packed GOP records, and their CPU decode with torchcodec.

A video record holds one GOP of one camera as its compressed packets (Annex-B H.264 or
HEVC, parameter sets in-band, decode order = presentation order: no B-frames). Frame k
of a GOP is its k-th packet, so no timestamps are involved at read time.

To decode, the GOPs a batch needs from one camera are muxed (PyAV, no re-encoding) into
one in-memory mp4 with consecutive frame numbers and decoded by one torchcodec decoder.
Creating a decoder costs about as much as decoding a GOP, so one decoder per batch and
camera instead of one per GOP halves the decode time (docs/FORMAT.md has the numbers).
torchcodec decoders are not thread-safe: each call makes its own, nothing is shared.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence
from fractions import Fraction

import av
import numpy as np
from torchcodec.decoders import VideoDecoder

_COUNT = struct.Struct("<I")
# Any constant rate works: frames are addressed by index, timestamps are never compared.
_TIME_BASE = Fraction(1, 30)


def pack_gop(packets: Sequence[bytes]) -> bytes:
    """One GOP's packets as one record: count, sizes, then the packet bytes."""
    sizes = np.asarray([len(p) for p in packets], dtype="<u4")
    return _COUNT.pack(len(packets)) + sizes.tobytes() + b"".join(packets)


def unpack_gop(record: bytes) -> list[bytes]:
    """The packets of a GOP record, in decode (= presentation) order."""
    (count,) = _COUNT.unpack_from(record)
    sizes = np.frombuffer(record, dtype="<u4", count=count, offset=_COUNT.size)
    ends = _COUNT.size + 4 * count + np.cumsum(sizes)
    starts = ends - sizes
    return [record[s:e] for s, e in zip(starts.tolist(), ends.tolist())]


def gop_num_frames(record: bytes) -> int:
    """Frames in a GOP record (one packet per frame)."""
    return _COUNT.unpack_from(record)[0]


def mux_gops(gops: Sequence[bytes], codec: str, width: int, height: int) -> bytes:
    """An mp4 holding the GOPs one after another, frame i at timestamp i."""
    buffer = io.BytesIO()
    # bitexact: no library version strings, so the bytes depend only on the packets.
    with av.open(buffer, "w", format="mp4", options={"fflags": "+bitexact"}) as out:
        stream = out.add_stream(codec, rate=_TIME_BASE.denominator)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.time_base = _TIME_BASE
        if codec == "hevc":
            stream.codec_tag = "hvc1"
        i = 0
        for gop in gops:
            for k, data in enumerate(unpack_gop(gop)):
                packet = av.Packet(data)
                packet.pts = packet.dts = i
                packet.time_base = _TIME_BASE
                packet.is_keyframe = k == 0
                packet.stream = stream
                out.mux(packet)
                i += 1
    return buffer.getvalue()


def decode_gops(
    gops: Sequence[bytes],
    frames: Sequence[Sequence[int]],
    codec: str,
    width: int,
    height: int,
) -> list[np.ndarray]:
    """Decodes frames `frames[g]` (indices within GOP g) of each GOP with one decoder.

    Returns, per GOP, uint8 RGB frames of shape (len(frames[g]), H, W, 3).
    """
    counts = [gop_num_frames(g) for g in gops]
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    wanted = [firsts[g] + np.asarray(f, dtype=np.int64) for g, f in enumerate(frames)]
    flat = np.concatenate(wanted) if wanted else np.zeros(0, np.int64)
    if flat.size == 0:
        return [np.zeros((0, height, width, 3), np.uint8) for _ in gops]
    unique, inverse = np.unique(flat, return_inverse=True)
    # "exact" indexes the muxed packets up front (cheap: they are all in memory).
    decoder = VideoDecoder(
        mux_gops(gops, codec, width, height), seek_mode="exact", dimension_order="NHWC"
    )
    decoded = decoder.get_frames_at(indices=unique.tolist()).data.numpy()[inverse]
    splits = np.cumsum([len(f) for f in frames])[:-1]
    return np.split(decoded, splits)
