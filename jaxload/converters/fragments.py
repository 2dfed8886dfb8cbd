"""Muxing one GOP's packets into the stored record layout (jaxload.format.mp4): an init
segment and one mp4 fragment, written by FFmpeg's muxer without re-encoding."""

from __future__ import annotations

import contextlib
import io
import os
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


def fragment_copied(
    packets: Sequence[bytes],
    shown: Sequence[int],
    cuts: Sequence[int],
    codec: str,
    width: int,
    height: int,
    extradata: bytes | None = None,
) -> tuple[bytes, list[bytes]]:
    """(init segment, fragments) of a copied stream: `packets` in decode order, packet k
    shown as frame `shown[k]` of the episode (presentation order, from 0), one fragment
    starting at each index of `cuts` (keyframes of closed GOPs; cuts[0] == 0).

    One muxing session for the whole run: FFmpeg's muxer opens an (unused) encoder per
    stream, which for AV1 (libsvtav1) costs more than the muxing. Decode times are the
    packet indices, composition times the presentation indices shifted by the run's
    largest reordering, so pts >= dts; `jaxload.format.mp4.build_mp4` re-spaces them per
    fragment. H.264/HEVC packets are Annex-B with parameter sets in-band (kept by the
    `avc1`/`hev1` sample entries); AV1's av1C comes from the source (`extradata`) and its
    keyframes carry their sequence header.
    """
    delay = max((k - p for k, p in enumerate(shown)), default=0)
    cut_set = set(cuts)
    buffer = io.BytesIO()
    with _quiet_svt(), av.open(buffer, "w", format="mp4", options=_MUXER_OPTIONS) as out:
        stream = out.add_stream(codec, rate=_TIME_BASE.denominator)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.time_base = _TIME_BASE
        if codec == "hevc":
            stream.codec_tag = "hev1"  # in-band parameter sets (hvc1 strips them)
            stream.options = {"x265-params": "pools=none:frame-threads=1:log-level=error"}
        if extradata:
            stream.codec_context.extradata = extradata
        for k, data in enumerate(packets):
            packet = av.Packet(data)
            packet.dts, packet.pts = k, shown[k] + delay
            packet.duration = 1
            packet.time_base = _TIME_BASE
            packet.is_keyframe = k in cut_set
            packet.stream = stream
            out.mux(packet)
    parts = list(boxes(buffer.getvalue()))
    init = b"".join(box for kind, box in parts if kind in (b"ftyp", b"moov"))
    fragments, moof = [], b""
    for kind, box in parts:
        if kind == b"moof":
            moof = box
        elif kind == b"mdat":
            fragments.append(moof + box)
    if len(fragments) != len(cuts):
        raise ValueError(f"{len(cuts)} GOPs muxed into {len(fragments)} fragments")
    return init, fragments


@contextlib.contextmanager
def _quiet_svt():
    """libsvtav1 (the unused encoder of an AV1 stream) logs ~40 info lines per open
    unless SVT_LOG says otherwise; errors only (a user's setting wins)."""
    if "SVT_LOG" in os.environ:
        yield
        return
    os.environ["SVT_LOG"] = "1"
    try:
        yield
    finally:
        os.environ.pop("SVT_LOG", None)
