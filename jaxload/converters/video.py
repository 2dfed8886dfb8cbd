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

from jaxload.converters.fragments import fragment_gop
from jaxload.decode.frames import decode_gops
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
    codec: str = "h264"  # "h264" | "hevc" | "lossless" | "copy"
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

    def for_camera(self, camera: str, *, image: bool = False) -> EncodeOptions:
        """The options one camera is encoded with: its chosen crf and target, full chroma
        for an image camera, lossless for one under --video-codec copy (there is no video
        stream to copy)."""
        options = self
        if image and self.codec == "copy":
            options = dataclasses.replace(options, codec="lossless", tune="fastdecode")
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
    path, from_timestamp: float, to_timestamp: float, num_frames: int, fps: int, *, episode: int
) -> EncodedStream:
    """Keeps the source bitstream: cuts the episode's packets at keyframes into segments.

    Only possible when the episode starts on a keyframe and its GOPs are closed; both are
    verified by decoding every segment and comparing it with a decode of the source.
    """
    container = _open(path, episode)
    with container:
        stream = container.streams.video[0]
        codec = stream.codec_context.codec.canonical_name
        if codec not in CODECS:
            raise SourceError(
                f"{path}: --video-codec copy keeps the source codec, but {codec!r} is not "
                f"h264 or hevc; use --video-codec h264"
            )
        container.seek(_to_pts(from_timestamp, stream), stream=stream, backward=True)
        lo, hi = from_timestamp - TOLERANCE_S, to_timestamp - TOLERANCE_S
        packets = [
            p
            for p in container.demux(stream)
            if p.pts is not None and lo <= float(p.pts * stream.time_base) < hi
        ]
        if not packets or not packets[0].is_keyframe:
            raise SourceError(
                f"{path}: episode {episode} does not start on a keyframe, so its stream "
                "cannot be copied; use --video-codec h264"
            )
        _check_no_reordering(packets, path, episode)
        gops = _split_gops(_to_annexb(packets, stream))
        if sum(len(g) for g in gops) != num_frames:  # before any muxing
            raise SourceError(
                f"{path}: episode {episode}: found {sum(len(g) for g in gops)} packets for "
                f"{num_frames} frames; cannot copy this stream, use --video-codec h264"
            )
        size = (codec, stream.codec_context.width, stream.codec_context.height)
        encoded = EncodedStream(codec)
        for gop in gops:
            encoded.add_gop([bytes(p) for p in gop], *size[1:])
    timestamps = np.arange(num_frames) / fps
    source = decode_source_frames(path, from_timestamp, timestamps, episode=episode)
    where = f"{path}: episode {episode}"
    psnrs = []
    for segment in encoded.segments:  # one GOP at a time: memory stays bounded
        refs = [next(source).to_ndarray(format="rgb24") for _ in range(gop_num_frames(segment))]
        psnrs.extend(_gops_psnr(encoded.init, [segment], refs, size, where))
    encoded.psnr = np.asarray(psnrs)
    return encoded


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
    bytes from run to run (tests/test_video_determinism.py shows it). Capped at AVX2 the
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


def _split_gops(packets: list[av.Packet]) -> list[list[av.Packet]]:
    gops: list[list[av.Packet]] = []
    for packet in packets:
        if packet.is_keyframe or not gops:
            gops.append([])
        gops[-1].append(packet)
    return gops


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


def _check_no_reordering(packets: list[av.Packet], path, episode: int) -> None:
    """Records address frame k as packet k: decode order must be presentation order."""
    pts = [p.pts for p in packets]
    if any(b <= a for a, b in itertools.pairwise(pts)):
        raise SourceError(
            f"{path}: episode {episode} has B-frames (packets out of presentation order), so "
            "its stream cannot be copied; use --video-codec h264"
        )


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
