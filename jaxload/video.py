"""Stored video: GOP records as fragmented-MP4 fragments, and their decode with torchcodec.

A camera's stream of one episode is stored as an init segment (`ftyp` + `moov`: codec,
size, parameter sets) followed by one record per GOP, each one fragment (`moof` + `mdat`)
written by FFmpeg's mp4 muxer. Fragments address their samples relative to their own
`moof` (`default_base_moof`), so any of them can follow an init segment: the mp4 for a
batch is the init segment and the GOPs the batch needs, concatenated, with each fragment's
decode time (`tfdt`) renumbered so frames are consecutive. That is a few byte copies
instead of a remux (docs/FORMAT.md has the numbers). Packets carry their parameter sets
in-band and there are no B-frames, so every GOP decodes on its own, frame k of a GOP is
its k-th sample, and one init segment serves GOPs of any episode of the camera.

torchcodec decoders are not thread-safe: each decode makes its own, nothing is shared.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from jaxload._torchcodec import video_decoder_class

# One tick per frame: a fragment's decode time is the number of frames before it. Any
# constant rate works: frames are addressed by index, never by timestamp.
_TIME_BASE = Fraction(1, 30)
_MUXER_OPTIONS = {
    "fflags": "+bitexact",  # no library version strings: bytes depend only on the packets
    "movflags": "frag_keyframe+empty_moov+default_base_moof",
    "video_track_timescale": str(_TIME_BASE.denominator),
}
_BOX = struct.Struct(">I4s")
_U32 = struct.Struct(">I")


def fragment_gop(
    packets: Sequence[bytes], codec: str, width: int, height: int
) -> tuple[bytes, bytes]:
    """(init segment, fragment) holding one GOP's packets (Annex-B, keyframe first), muxed
    by FFmpeg without re-encoding. The init segment is the same for every GOP of a stream
    with the same codec, size and parameter sets."""
    import av  # imported by the converter only: reading needs no PyAV

    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4", options=_MUXER_OPTIONS) as out:
        stream = out.add_stream(codec, rate=_TIME_BASE.denominator)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.time_base = _TIME_BASE
        if codec == "hevc":
            stream.codec_tag = "hvc1"
        for k, data in enumerate(packets):
            packet = av.Packet(data)
            packet.pts = packet.dts = k
            packet.duration = 1
            packet.time_base = _TIME_BASE
            packet.is_keyframe = k == 0
            packet.stream = stream
            out.mux(packet)
    boxes = list(_boxes(buffer.getvalue()))
    init = b"".join(box for kind, box in boxes if kind in (b"ftyp", b"moov"))
    fragment = b"".join(box for kind, box in boxes if kind in (b"moof", b"mdat"))
    if [kind for kind, _ in boxes if kind == b"moof"] != [b"moof"]:
        raise ValueError(f"{len(packets)} packets did not mux into one fragment (one keyframe?)")
    return init, fragment


def gop_num_frames(fragment: bytes) -> int:
    """Frames in a GOP record: the sample count of its fragment's track runs."""
    return _fragment_fields(fragment)[2]


def build_mp4(init: bytes, fragments: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """One mp4 of `fragments` after `init`, frames numbered 0.. in this order, and the
    number of frames of each fragment.

    Only each fragment's `tfdt` changes (its decode time: the frames before it); the rest
    is concatenated as stored.
    """
    parts, counts, frames = [init], [], 0
    for fragment in fragments:
        tfdt, version, count = _fragment_fields(fragment)
        moof_size = _U32.unpack_from(fragment)[0]
        header = bytearray(fragment[:moof_size])
        struct.pack_into(">Q" if version == 1 else ">I", header, tfdt + 12, frames)
        parts += [header, memoryview(fragment)[moof_size:]]
        counts.append(count)
        frames += count
    return b"".join(parts), counts


def _boxes(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(type, bytes) of each top-level box of an mp4 written by FFmpeg."""
    offset = 0
    while offset < len(data):
        size, kind = _BOX.unpack_from(data, offset)
        if size < 8:  # 64-bit and to-end sizes: FFmpeg writes neither for these boxes
            raise ValueError(f"unexpected mp4 box size {size} ({kind!r}) at byte {offset}")
        yield kind, data[offset : offset + size]
        offset += size


def _fragment_fields(fragment: bytes) -> tuple[int, int, int]:
    """(offset of the `tfdt` box, its version, frame count) of a fragment: a `moof` whose
    `traf` holds a `tfdt` and track runs (`trun`), then its `mdat`."""
    moof_size, kind = _BOX.unpack_from(fragment)
    if kind != b"moof":
        raise ValueError(f"not an mp4 fragment: starts with a {kind!r} box")
    tfdt, count, offset = -1, 0, 8
    while offset < moof_size:
        size, kind = _BOX.unpack_from(fragment, offset)
        if kind == b"traf":
            child = offset + 8
            while child < offset + size:
                child_size, child_kind = _BOX.unpack_from(fragment, child)
                if child_kind == b"tfdt":
                    tfdt = child
                elif child_kind == b"trun":
                    count += _U32.unpack_from(fragment, child + 12)[0]
                child += max(child_size, 8)
        offset += max(size, 8)
    if tfdt < 0:
        raise ValueError("mp4 fragment without a decode time (tfdt)")
    return tfdt, fragment[tfdt + 8], count


@dataclasses.dataclass
class EncodedFrames:
    """One camera's frames for a batch, still compressed.

    `gops[g]` is a GOP record (an mp4 fragment) that decodes after the `init` segment; the
    frame for sample b, window slot t is frame `frame_index[b, t]` of GOP `gop_index[b, t]`.
    Small and picklable: Grain workers can hand it to the training process to decode there
    (GPU).
    """

    codec: str
    width: int
    height: int
    init: bytes
    gops: list[bytes]
    gop_index: np.ndarray
    frame_index: np.ndarray

    @classmethod
    def from_slots(
        cls, records: Sequence[bytes], slots: np.ndarray, local: np.ndarray, **stream: Any
    ) -> EncodedFrames:
        """From per-(sample, slot) record numbers and frames within those records."""
        unique, gop_index = np.unique(slots, return_inverse=True)
        return cls(
            gops=[records[s] for s in unique],
            gop_index=gop_index.reshape(slots.shape),
            frame_index=np.asarray(local),
            **stream,
        )

    @classmethod
    def concat(cls, parts: Sequence[EncodedFrames]) -> EncodedFrames:
        """The frames of every part, flattened in order into one (N,) index (their GOPs
        kept apart, the first part's init segment). Parts must share codec and size."""
        first = parts[0]
        gops: list[bytes] = []
        gop_index, frame_index = [], []
        for part in parts:
            if (part.codec, part.width, part.height) != (first.codec, first.width, first.height):
                raise ValueError(
                    "frames decoded together need one codec and size: "
                    f"{first.codec} {first.width}x{first.height} vs "
                    f"{part.codec} {part.width}x{part.height}"
                )
            gop_index.append(part.gop_index.reshape(-1) + len(gops))
            frame_index.append(part.frame_index.reshape(-1))
            gops += part.gops
        return dataclasses.replace(
            first,
            gops=gops,
            gop_index=np.concatenate(gop_index),
            frame_index=np.concatenate(frame_index),
        )

    def select(self, rows: np.ndarray | slice) -> EncodedFrames:
        """The frames of samples `rows` only (e.g. the rows one device holds)."""
        gop_index, frame_index = self.gop_index[rows], self.frame_index[rows]
        kept, remap = np.unique(gop_index, return_inverse=True)
        return dataclasses.replace(
            self,
            gops=[self.gops[g] for g in kept],
            gop_index=remap.reshape(gop_index.shape),
            frame_index=frame_index,
        )

    def decode(self, device: str = "cpu", *, as_torch: bool = False) -> Any:
        """(B, T, H, W, 3) uint8 frames, contiguous: numpy on "cpu" unless `as_torch`, else
        a torch tensor on `device` (e.g. "cuda:0", decoded there by NVDEC)."""
        mp4, counts = build_mp4(self.init, self.gops)
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        decoder = video_decoder_class()(
            mp4,
            seek_mode="exact",  # indexes the in-memory packets up front: cheap
            dimension_order="NHWC",
            device=device,
        )
        # In (sample, slot) order: torchcodec decodes each frame once, in stream order, and
        # writes it straight into every slot that wants it (no gather afterwards: 15% less
        # time per batch at 480x640).
        indices = (firsts[self.gop_index] + self.frame_index).reshape(-1)
        frames = decoder.get_frames_at(indices=indices.tolist()).data
        frames = frames.reshape(*self.gop_index.shape, self.height, self.width, 3)
        return frames if as_torch or frames.device.type != "cpu" else frames.numpy()


def decode_all(videos: Sequence[EncodedFrames]) -> list[np.ndarray]:
    """Each video's (B, T, H, W, 3) frames on the CPU, with one decoder per codec and
    frame size: cameras of the same size share one (any camera's GOPs decode after any
    init segment of that codec and size, their parameter sets being in-band). A decoder
    costs ~1.7 ms at 96x128, 7% of a batch of 32 there."""
    out: list[np.ndarray | None] = [None] * len(videos)
    groups: dict[tuple[str, int, int], list[int]] = {}
    for i, video in enumerate(videos):
        groups.setdefault((video.codec, video.width, video.height), []).append(i)
    for members in groups.values():
        parts = [videos[i] for i in members]
        frames = EncodedFrames.concat(parts).decode()  # (frames, H, W, 3)
        start = 0
        for i, part in zip(members, parts):
            size = part.gop_index.size
            out[i] = frames[start : start + size].reshape(*part.gop_index.shape, *frames.shape[1:])
            start += size
    return out  # type: ignore[return-value]


def decode_gops(
    init: bytes,
    gops: Sequence[bytes],
    frames: Sequence[Sequence[int]],
    codec: str,
    width: int,
    height: int,
) -> list[np.ndarray]:
    """Decodes frames `frames[g]` (indices within GOP g) of each GOP with one decoder.

    Returns, per GOP, uint8 RGB frames of shape (len(frames[g]), H, W, 3).
    """
    if not any(len(f) for f in frames):
        return [np.zeros((0, height, width, 3), np.uint8) for _ in gops]
    local = np.concatenate([np.asarray(f, dtype=np.int64) for f in frames])
    gop = np.repeat(np.arange(len(gops)), [len(f) for f in frames])
    encoded = EncodedFrames.from_slots(
        list(gops), gop[None, :], local[None, :], init=init, codec=codec, width=width, height=height
    )
    decoded = encoded.decode()[0]
    return np.split(decoded, np.cumsum([len(f) for f in frames])[:-1])
