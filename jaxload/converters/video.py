"""Video for the converter: decode a source episode, re-encode it in fixed GOPs, and cut
the stream into an mp4 init segment and one self-contained fragment per GOP (what the
reader decodes; jaxload/format/mp4.py).

Decoding the source uses PyAV (its frames stay in YUV, so the transcode does no extra
RGB round trip); frames are picked exactly as LeRobotDataset picks them: the frame of the
file at time from_timestamp + timestamp, within LeRobot's tolerance.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import platform
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from jaxload.converters.fragments import fragment_copied, fragment_gop
from jaxload.decode.frames import decode_gops
from jaxload.decode.torchcodec_import import video_decoder_class
from jaxload.errors import DatasetError, SourceError
from jaxload.format.mp4 import gop_num_frames

# --video-codec -> FFmpeg encoder. "lossless" is x264's RGB mode at qp 0: every pixel
# decodes exactly as it went in, for users who need exact pixels.
CODECS = {"h264": "libx264", "hevc": "libx265", "lossless": "libx264rgb"}
# Codec names stored per camera (meta/info.json) besides plain "h264"/"hevc" (4:2:0):
# "h264-yuv444p"/"hevc-yuv444p" (full chroma, for image cameras) and "h264rgb" (H.264
# High 4:4:4 in GBR, lossless). FFmpeg decodes them all; NVDEC decodes none of the H.264
# ones (so they never go to a GPU), and streams of different names never share a decoder.
STORED_PIX_FMTS = {
    "h264": "yuv420p",
    "hevc": "yuv420p",
    "h264-yuv444p": "yuv444p",
    "hevc-yuv444p": "yuv444p",
    "h264rgb": "gbrp",
}
# Image cameras (LeRobot `image` features: PNG/JPEG frames) keep full chroma: 4:2:0 alone
# caps the fixture's sharp renders at 32-34 dB PSNR whatever the crf (docs/CONVERT.md).
IMAGE_PIX_FMT = "yuv444p"
# Their default fidelity target when neither --crf nor --min-psnr is given.
DEFAULT_IMAGE_MIN_PSNR = 40.0
# Below this a stored stream is not a lossy copy of its source but a broken one (an encoder
# bug, a decoder mismatch): the conversion stops instead of writing it.
BROKEN_PSNR_DB = 20.0
# A frame decoded more than this far from its query time is a mismatch (LeRobot's default).
TOLERANCE_S = 1e-4
# --resize/--max-size: area averaging (right for shrinking), bit-exact and accurately
# rounded so that swscale's output does not depend on the CPU's SIMD.
RESIZE_INTERPOLATION = (
    av.video.reformatter.Interpolation.AREA
    | av.video.reformatter.Interpolation.BITEXACT
    | av.video.reformatter.Interpolation.ACCURATE_RND
)


@dataclasses.dataclass(frozen=True)
class EncodeOptions:
    codec: str = (
        "auto"  # "auto" (copy what the readers decode) | "copy" | "h264" | "hevc" | "lossless"
    )
    gop: int = 4
    crf: int = 14
    preset: str = "medium"
    # x264 "fastdecode" (no CABAC, deblocking or weighted prediction): at 480x640 a random
    # frame decodes 2.3x faster for 19% more bytes (docs/FORMAT.md). "" = none.
    tune: str = ""
    pix_fmt: str = "yuv420p"  # of an h264/hevc encode (IMAGE_PIX_FMT for image cameras)
    # --min-psnr: the fidelity every stored frame must reach against the source (dB); the
    # crf per camera is chosen to meet it (converters/fidelity.py). None: use `crf`.
    min_psnr: float | None = None
    # The same target for image cameras only (their default, unless --crf was given).
    image_min_psnr: float | None = None
    camera_crf: tuple[tuple[str, int], ...] = ()  # (camera, crf) chosen for a target
    # --resize HxW: every camera stored at (height, width); --max-size N: the longer side at
    # most N, aspect kept (sides rounded to even). None: the source's size.
    resize: tuple[int, int] | None = None
    max_size: int | None = None

    def stored_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) a camera of this source size is stored at."""
        if self.resize is not None:
            return self.resize
        if self.max_size is None or max(height, width) <= self.max_size:
            return height, width
        scale = self.max_size / max(height, width)
        return (max(2, round(height * scale / 2) * 2), max(2, round(width * scale / 2) * 2))

    def settings(self) -> dict:
        """These options as the plan and the record seed record them (JSON types); the
        resize fields only when set, so other conversions keep their bytes."""
        out = json.loads(json.dumps(dataclasses.asdict(self)))  # tuples -> lists
        for name in ("resize", "max_size"):
            if out[name] is None:
                del out[name]
        return out

    def for_camera(
        self, camera: str, *, image: bool = False, source_codec: str | None = None
    ) -> EncodeOptions:
        """The options one camera is encoded with: its chosen crf and target, full chroma
        for an image camera, lossless for one under "copy" or "auto" (there is no video
        stream to copy); under "auto" (the default) a video camera is copied when the
        readers decode its `source_codec` (COPY_CODECS), re-encoded to h264 otherwise."""
        options = self
        if image and self.codec in ("copy", "auto"):
            options = dataclasses.replace(options, codec="lossless", tune="fastdecode")
        elif self.codec == "auto":
            copied = source_codec in COPY_CODECS
            options = dataclasses.replace(
                options, codec="copy" if copied else "h264", tune="" if copied else self.tune
            )
        if image and options.codec in ("h264", "hevc"):
            options = dataclasses.replace(
                options, pix_fmt=IMAGE_PIX_FMT, min_psnr=self.target(image=True)
            )
        crf = dict(self.camera_crf).get(camera)
        return options if crf is None else dataclasses.replace(options, crf=crf)

    def target(self, *, image: bool) -> float | None:
        """The PSNR target a camera's crf is chosen for (None: the fixed crf)."""
        if self.codec not in ("h264", "hevc"):
            return None
        return self.min_psnr if self.min_psnr is not None or not image else self.image_min_psnr

    @property
    def stored_codec(self) -> str:
        if self.codec == "lossless":
            return "h264rgb"
        return self.codec if self.pix_fmt == "yuv420p" else f"{self.codec}-{self.pix_fmt}"


def mux_codec(stored_codec: str) -> str:
    """The FFmpeg codec name a stored codec's packets are muxed as."""
    return "h264" if stored_codec == "h264rgb" else stored_codec.split("-")[0]


@dataclasses.dataclass
class EncodedStream:
    """One episode's stream of one camera: an mp4 init segment and one fragment per GOP."""

    codec: str
    init: bytes = b""  # the first GOP's (every GOP of the stream has the same one)
    segments: list[bytes] = dataclasses.field(default_factory=list)
    # frame index (within the episode) of each segment's first frame
    segment_starts: list[int] = dataclasses.field(default_factory=list)
    # per-frame PSNR (dB) of the stored stream against the source decode
    psnr: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))

    @property
    def records(self) -> list[bytes]:
        """The stream's records in storage order: init segment, then the GOPs."""
        return [self.init, *self.segments]

    def add_gop(self, packets: Sequence[bytes], width: int, height: int) -> None:
        """Appends one GOP (Annex-B packets, keyframe first) as an mp4 fragment."""
        codec = mux_codec(self.codec)
        # hevc's init segment carries the muxer's own parameter sets (converters/fragments.py):
        # they must describe the stream's chroma. h264's come from the stream itself.
        pix_fmt = STORED_PIX_FMTS.get(self.codec, "yuv420p") if codec == "hevc" else "yuv420p"
        init, fragment = fragment_gop(packets, codec, width, height, pix_fmt)
        self.init = self.init or init
        first = self.segment_starts[-1] + gop_num_frames(self.segments[-1]) if self.segments else 0
        self.segment_starts.append(first)
        self.segments.append(fragment)


def decode_source_frames(
    path, from_timestamp: float, timestamps: Sequence[float], *, episode: int
) -> Iterator[av.VideoFrame]:
    """Yields the source frames of one episode in order: the frame shown at
    from_timestamp + timestamps[k] for each k, or a SourceError naming file and episode."""
    queries = from_timestamp + np.asarray(timestamps, dtype=np.float64)
    container = _open(path, episode)
    with container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        container.seek(_to_pts(queries[0], stream), stream=stream, backward=True)
        k = 0
        try:
            for frame in container.decode(stream):
                t = float(frame.pts * stream.time_base)
                if t > queries[k] + TOLERANCE_S:
                    raise SourceError(
                        f"{path}: episode {episode}: no frame at {queries[k]:.6f} s "
                        f"(frame {k} of the episode); next frame is at {t:.6f} s"
                    )
                if t < queries[k] - TOLERANCE_S:
                    continue
                yield frame
                k += 1
                if k == len(queries):
                    return
        except av.FFmpegError as e:
            raise SourceError(f"{path}: episode {episode}: decode failed at frame {k} ({e})") from e
    raise SourceError(
        f"{path}: episode {episode}: video too short: it ends before frame {k} of "
        f"{len(queries)} (time {queries[k]:.6f} s)"
    )


def transcode(
    frames: Iterator[av.VideoFrame], options: EncodeOptions, fps: int, *, where: str
) -> EncodedStream:
    """Encodes frames with a fixed GOP and no B-frames; returns the segments and fidelity.

    Memory stays bounded by the encoder's lookahead: each GOP is checked against its
    source frames as soon as it is complete, then both are dropped.
    """
    stream = EncodedStream(options.stored_codec)
    reference: collections.deque[np.ndarray] = collections.deque()
    psnrs: list[float] = []
    open_gop: list[av.Packet] = []
    encoder = None

    def take(packets: list[av.Packet]) -> None:
        for packet in packets:
            if packet.is_keyframe and open_gop:
                close_gop()
            open_gop.append(packet)

    def close_gop() -> None:
        # libx264/libx265 emit Annex-B with in-band parameter sets: each GOP stands alone.
        stream.add_gop([bytes(p) for p in open_gop], encoder.width, encoder.height)
        refs = [reference.popleft() for _ in open_gop]
        size = (options.stored_codec, encoder.width, encoder.height)
        psnrs.extend(_gops_psnr(stream.init, stream.segments[-1:], refs, size, where))
        open_gop.clear()

    for i, frame in enumerate(frames):
        frame = resized(frame, options.stored_size(frame.height, frame.width))
        if encoder is None:
            encoder = _make_encoder(options, fps, frame.width, frame.height, where)
        reference.append(frame.to_ndarray(format="rgb24"))  # the (resized) source
        out = frame.reformat(format=encoder.pix_fmt)
        out.pts, out.time_base = i, encoder.time_base
        out.pict_type = av.video.frame.PictureType.NONE
        take(encoder.encode(out))
    if encoder is None:
        raise SourceError(f"{where}: no frames to encode")
    take(encoder.encode(None))
    close_gop()
    stream.psnr = np.asarray(psnrs)
    return stream


def resized(frame: av.VideoFrame, size: tuple[int, int]) -> av.VideoFrame:
    """`frame` at (height, width) (itself when it has that size already): swscale's area
    average, bit-exact (the same bytes on every CPU), in the frame's own pixel format."""
    height, width = size
    if (frame.height, frame.width) == (height, width):
        return frame
    return frame.reformat(width=width, height=height, interpolation=RESIZE_INTERPOLATION)


def copy_stream(
    path,
    from_timestamp: float,
    to_timestamp: float,
    timestamps: Sequence[float],
    *,
    episode: int,
) -> EncodedStream:
    """Keeps the source bitstream: the episode's packets, cut into one GOP record at each
    keyframe that starts a closed GOP (module `copy_cuts`), muxed without re-encoding.

    H.264, HEVC (B-frames too) and AV1 (its temporal units: hidden frames travel with the
    shown frame they belong to). Frame t of the episode is the t-th frame in presentation
    order of its records. Verified: every record is decoded on its own, as the reader
    decodes it, and must give exactly the frames torchcodec decodes from the source at the
    episode's timestamps (what LeRobotDataset returns); otherwise a SourceError.
    """
    num_frames = len(timestamps)
    container = _open(path, episode)
    with container:
        stream = container.streams.video[0]
        codec = stream.codec_context.codec.canonical_name
        if codec not in COPY_CODECS:
            raise SourceError(
                f"{path}: --video-codec copy keeps the source codec, but {codec!r} is not "
                f"one the readers decode ({', '.join(COPY_CODECS)}); use --video-codec h264"
            )
        width, height = stream.codec_context.width, stream.codec_context.height
        extradata = stream.codec_context.extradata if codec == "av1" else None
        container.seek(_to_pts(from_timestamp, stream), stream=stream, backward=True)
        packets = _episode_packets(container, stream, from_timestamp, to_timestamp)
        data, shown, cuts = copy_cuts(packets, num_frames, f"{path}: episode {episode}")
        if codec != "av1":  # the stream's filter context needs the container open
            data = _to_annexb_bytes(data, stream)
    init, fragments = fragment_copied(data, shown, cuts, codec, width, height, extradata)
    encoded = EncodedStream(codec, init=init)
    for cut, fragment in zip(cuts, fragments):
        encoded.segment_starts.append(shown[cut])  # a cut is the first frame its GOP shows
        encoded.segments.append(fragment)
    _verify_copy(path, encoded, from_timestamp, timestamps, (codec, width, height), episode)
    encoded.psnr = np.full(num_frames, np.inf)
    return encoded


# The codecs the readers decode, whose streams are copied (H.264, HEVC, AV1).
COPY_CODECS = ("h264", "hevc", "av1")
# Packets read past an episode's end: more than any decoder reorders (H.264's DPB holds 16).
_REORDER_MARGIN = 32


def _episode_packets(container, stream, from_timestamp: float, to_timestamp: float):
    """(pts in seconds, keyframe, bytes) of the packets from the seek point on, in decode
    order, up to _REORDER_MARGIN packets past the first keyframe at or after the end."""
    out, past = [], None
    end = to_timestamp - TOLERANCE_S
    for packet in container.demux(stream):
        if packet.pts is None:
            continue
        t = float(packet.pts * stream.time_base)
        out.append((t, packet.is_keyframe, bytes(packet)))
        if past is None and packet.is_keyframe and t >= end:
            past = len(out)
        if past is not None and len(out) >= past + _REORDER_MARGIN:
            break
    lo = from_timestamp - TOLERANCE_S
    return [(t, key, data, lo <= t < end) for t, key, data in out]


def copy_cuts(
    packets: Sequence[tuple[float, bool, bytes, bool]], num_frames: int, where: str
) -> tuple[list[bytes], list[int], list[int]]:
    """(packet bytes, frame each is shown as, record cuts) of an episode's packets.

    `packets`: (pts, keyframe, bytes, in the episode) in decode order. The episode's packets
    must be one run in decode order holding exactly its frames, starting on a keyframe
    that no later packet precedes in presentation (a closed GOP). Records are cut at each
    such keyframe: a keyframe followed by frames shown before it (leading frames of an
    open GOP, which reference the GOP before) is no cut, so its GOP joins the previous
    record. An episode that starts inside a GOP, or whose frames are not one run, cannot
    be copied (SourceError).
    """
    inside = [i for i, p in enumerate(packets) if p[3]]
    if len(inside) < num_frames:
        raise SourceError(
            f"{where}: video too short: found {len(inside)} packets for {num_frames} frames "
            "in the episode's time span"
        )
    if len(inside) > num_frames:
        raise SourceError(
            f"{where}: found {len(inside)} packets for {num_frames} frames in the episode's "
            "time span; cannot copy this stream, use --video-codec h264"
        )
    a, b = inside[0], inside[-1] + 1
    if b - a != num_frames:
        raise SourceError(
            f"{where}: its packets are interleaved with other frames in decode order; cannot "
            "copy this stream, use --video-codec h264"
        )
    pts = [p[0] for p in packets]
    order = sorted(range(a, b), key=pts.__getitem__)
    shown = [0] * num_frames
    for rank, i in enumerate(order):
        shown[i - a] = rank
    before = max(pts[:a], default=-np.inf)
    if not packets[a][1] or order[0] != a or before >= pts[a]:
        raise SourceError(
            f"{where} does not start on a keyframe of a closed GOP (it starts inside a GOP of "
            "the source file), so its stream cannot be copied; use --video-codec h264"
        )
    # A cut at packet k: every frame decoded before it is shown before it, every later one after.
    later = list(itertools.accumulate(reversed(shown), min))[::-1]
    cuts, seen = [0], -1
    for k in range(num_frames):
        if k and packets[a + k][1] and seen < shown[k] == later[k]:
            cuts.append(k)
        seen = max(seen, shown[k])
    return [p[2] for p in packets[a:b]], shown, cuts


def _to_annexb_bytes(data: list[bytes], stream) -> list[bytes]:
    packets = []
    for i, chunk in enumerate(data):
        packet = av.Packet(chunk)
        packet.pts = packet.dts = i
        packet.stream = stream
        packets.append(packet)
    return [bytes(p) for p in _to_annexb(packets, stream)]


def _verify_copy(path, encoded: EncodedStream, from_timestamp, timestamps, size, episode) -> None:
    """Each GOP record decoded alone after the init segment (as the reader does) must give
    exactly the frames LeRobotDataset decodes from the source at the episode's timestamps:
    torchcodec, approximate seek mode, frame round(t * average_fps) (lerobot's
    decode_video_frames_torchcodec)."""
    where = f"{path}: episode {episode}"
    decoder = video_decoder_class()(str(path), seek_mode="approximate", dimension_order="NHWC")
    times = from_timestamp + np.asarray(timestamps, np.float64)
    indices = [round(t * decoder.metadata.average_fps) for t in times]
    bounds = [*encoded.segment_starts, len(timestamps)]
    for g, segment in enumerate(encoded.segments):
        first, stop = bounds[g], bounds[g + 1]
        try:
            got = decode_gops(encoded.init, [segment], [range(stop - first)], *size)[0]
        except (RuntimeError, DatasetError) as e:
            raise SourceError(f"{where}: copied GOP {g} does not decode ({e})") from e
        want = decoder.get_frames_at(indices=indices[first:stop]).data.numpy()
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = next(i for i in range(len(want)) if not np.array_equal(got[i], want[i]))
            raise SourceError(
                f"{where}: frame {first + bad} of the copied stream differs from the source's "
                "decode (the source's GOPs do not decode on their own); use --video-codec h264"
            )


def _open(path, episode: int) -> av.container.InputContainer:
    try:
        container = av.open(str(path))
    except (av.FFmpegError, OSError) as e:
        raise SourceError(f"{path}: episode {episode}: cannot open video ({e})") from e
    if not container.streams.video:
        container.close()
        raise SourceError(f"{path}: episode {episode}: file has no video stream")
    return container


def _to_pts(seconds: float, stream) -> int:
    return max(0, int(Fraction(seconds).limit_denominator(10**6) / stream.time_base))


def x264_asm_cap() -> str:
    """x264-params that keep libx264's output deterministic on AVX-512 CPUs ("" elsewhere).

    libx264's AVX-512 kernels read uninitialised memory for frame widths that are not a
    multiple of 64 (seen here at 80, 84 and 96): the same frames then encode to different
    bytes from run to run (tests/converters/test_video_determinism.py shows it). Capped at AVX2 the
    output is stable, and identical to what AVX2-only machines produce.
    """
    if platform.machine() not in ("x86_64", "AMD64"):
        return ""
    try:
        has_avx512 = "avx512" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return "asm=AVX2,Cache64" if has_avx512 else ""


def _make_encoder(options: EncodeOptions, fps: int, width: int, height: int, where: str):
    name = CODECS[options.codec]
    pix_fmt = "rgb24" if options.codec == "lossless" else options.pix_fmt
    if pix_fmt == "yuv420p" and (width % 2 or height % 2):
        raise SourceError(
            f"{where}: {width}x{height} frames cannot be stored as yuv420p (odd size); "
            "use --video-codec lossless (or copy for a video camera)"
        )
    encoder = av.CodecContext.create(name, "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, pix_fmt
    encoder.time_base = Fraction(1, fps)
    encoder.framerate = Fraction(fps, 1)
    encoder.gop_size = options.gop
    encoder.max_b_frames = 0
    # No global header: SPS/PPS stay in-band in every keyframe, so each GOP fragment is
    # self-contained and the mp4 muxer derives its avcC/hvcC from the first packet.
    # One thread: x264/x265 output then depends only on the input, not on the machine.
    encoder.thread_count = 1
    g = options.gop
    if options.codec in ("h264", "lossless"):
        params = ":".join(
            filter(
                None, [f"keyint={g}:min-keyint={g}:scenecut=0:bframes=0:threads=1", x264_asm_cap()]
            )
        )
        quality = {"qp": "0"} if options.codec == "lossless" else {"crf": str(options.crf)}
        encoder.options = {**quality, "preset": options.preset, "x264-params": params}
        if options.tune:
            encoder.options = {**encoder.options, "tune": options.tune}
    else:
        params = (
            f"keyint={g}:min-keyint={g}:scenecut=0:bframes=0:open-gop=0:"
            "frame-threads=1:pools=none:log-level=none"
        )
        encoder.options = {"crf": str(options.crf), "preset": options.preset, "x265-params": params}
    return encoder


def _to_annexb(packets: list[av.Packet], stream) -> list[av.Packet]:
    """mp4 stores length-prefixed NAL units with parameter sets in the header; the records
    keep the parameter sets in-band (the muxer keeps them when it converts back from
    Annex-B), so every GOP decodes on its own, after any init segment of the camera."""
    name = {"h264": "h264_mp4toannexb", "hevc": "hevc_mp4toannexb"}[
        stream.codec_context.codec.canonical_name
    ]
    bsf = av.BitStreamFilterContext(name, stream)
    out = [q for p in packets for q in bsf.filter(p)]
    out += bsf.filter(None)
    return out


def _gops_psnr(
    init: bytes,
    segments: list[bytes],
    reference: list[np.ndarray],
    size: tuple[str, int, int],
    where: str,
) -> list[float]:
    """Per-frame PSNR of GOP records (decoded as the reader decodes them) vs reference."""
    counts = [gop_num_frames(s) for s in segments]
    if sum(counts) != len(reference):
        raise SourceError(
            f"{where}: stored stream has {sum(counts)} frames, expected {len(reference)}"
        )
    try:
        decoded = decode_gops(init, segments, [range(n) for n in counts], *size)
    except (RuntimeError, DatasetError) as e:
        raise SourceError(f"{where}: stored stream does not decode ({e})") from e
    return [psnr(a, b) for a, b in zip(np.concatenate(decoded), reference)]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 images in dB (inf when identical)."""
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))
