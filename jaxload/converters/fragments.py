"""Muxing one GOP's packets into the stored record layout (jaxload.format.mp4): an init
segment and one mp4 fragment, written by FFmpeg's muxer without re-encoding."""

from __future__ import annotations

import io
from collections.abc import Sequence
from fractions import Fraction

import av

from jaxload.format.mp4 import boxes

# One tick per frame: a fragment's decode time is the number of frames before it. Any
# constant rate works: frames are addressed by index, never by timestamp.
_TIME_BASE = Fraction(1, 30)
_MUXER_OPTIONS = {
    "fflags": "+bitexact",  # no library version strings: bytes depend only on the packets
    "movflags": "frag_keyframe+empty_moov+default_base_moof",
    "video_track_timescale": str(_TIME_BASE.denominator),
}


def fragment_gop(
    packets: Sequence[bytes], codec: str, width: int, height: int, pix_fmt: str = "yuv420p"
) -> tuple[bytes, bytes]:
    """(init segment, fragment) holding one GOP's packets (Annex-B, keyframe first), muxed
    by FFmpeg without re-encoding. The init segment is the same for every GOP of a stream
    with the same codec, size and parameter sets."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4", options=_MUXER_OPTIONS) as out:
        stream = out.add_stream(codec, rate=_TIME_BASE.denominator)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        stream.time_base = _TIME_BASE
        if codec == "hevc":
            stream.codec_tag = "hvc1"
            # PyAV opens an (unused) libx265 encoder for the stream, and the muxer writes its
            # parameter sets into the hvcC box, which decoders prefer over the in-band ones:
            # they must match the real encoder's (converters/video.py), or records decode
            # to garbage (x265 turns wavefront parallelism on with a thread pool, 4:2:0 is
            # not 4:4:4). Its log: errors only (~20 `x265 [info]` lines per GOP otherwise).
            stream.options = {"x265-params": "pools=none:frame-threads=1:log-level=error"}
        for k, data in enumerate(packets):
            packet = av.Packet(data)
            packet.pts = packet.dts = k
            packet.duration = 1
            packet.time_base = _TIME_BASE
            packet.is_keyframe = k == 0
            packet.stream = stream
            out.mux(packet)
    parts = list(boxes(buffer.getvalue()))
    init = b"".join(box for kind, box in parts if kind in (b"ftyp", b"moov"))
    fragment = b"".join(box for kind, box in parts if kind in (b"moof", b"mdat"))
    if [kind for kind, _ in parts if kind == b"moof"] != [b"moof"]:
        raise ValueError(f"{len(packets)} packets did not mux into one fragment (one keyframe?)")
    return init, fragment
