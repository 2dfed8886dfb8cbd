"""GOP records as mp4 fragments: the box-level layout jaxload stores and reads.

A camera's stream of one episode is stored as an init segment (`ftyp` + `moov`: codec,
size, parameter sets) followed by one record per GOP, each one fragment (`moof` + `mdat`)
written by FFmpeg's mp4 muxer. Fragments address their samples relative to their own
`moof` (`default_base_moof`), so any of them can follow an init segment: the mp4 for a
batch is the init segment and the GOPs the batch needs, concatenated, with each fragment's
decode time (`tfdt`) renumbered so frames are consecutive. That is a few byte copies
instead of a remux (docs/FORMAT.md has the numbers). Every GOP decodes on its own (it
starts on a keyframe of a closed GOP, and H.264/HEVC packets carry their parameter sets
in-band, AV1 keyframes their sequence header), so one init segment serves GOPs of any
episode of the camera. Frame k of a GOP is its k-th frame in *presentation* order: the
k-th sample when decode order is presentation order (transcodes, AV1), otherwise the
frame whose composition time (decode time + the `trun`'s composition offset) is the k-th
smallest of the fragment's: copied H.264/HEVC streams with B-frames. A GOP's composition
times are consecutive ticks; `build_mp4` spaces the fragments' decode times so that every
composition time of a GOP precedes the next GOP's, so frame k of GOP g of a built mp4 is
its (frames of the GOPs before g + k)-th frame in presentation order.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

_BOX = struct.Struct(">I4s")
_U32 = struct.Struct(">I")


def gop_num_frames(fragment: bytes) -> int:
    """Frames in a GOP record: the sample count of its fragment's track runs."""
    return _fragment_fields(fragment)[2]


def presentation_span(fragment: bytes) -> tuple[int, int]:
    """(lo, hi): the smallest and largest presentation offset (sample k's decode index k +
    its composition offset, in frames) among a fragment's samples; (0, count - 1) for a
    fragment without composition offsets."""
    offsets = _composition_offsets(fragment)
    return min(offsets), max(offsets)


def sample_entry(init: bytes) -> tuple[str, int, int]:
    """(codec fourcc, width, height) of an init segment's video track: its first sample
    entry (`moov/trak/mdia/minf/stbl/stsd`), e.g. ("avc1", 128, 96). ValueError when the
    bytes are no init segment."""
    data, offset, end = memoryview(init), 0, len(init)
    for container in (b"moov", b"trak", b"mdia", b"minf", b"stbl", b"stsd"):
        while True:
            if offset + 8 > end:
                raise ValueError(f"no {container.decode()} box in the init segment")
            size, kind = _BOX.unpack_from(data, offset)
            if size < 8 or offset + size > end:
                raise ValueError(f"bad mp4 box size {size} ({kind!r}) at byte {offset}")
            if kind == container:
                offset, end = offset + 8, offset + size
                break
            offset += size
    entry = offset + 8  # stsd: version and flags, entry count, then the entries
    if entry + 36 > end:
        raise ValueError("an empty sample description (stsd)")
    kind = bytes(data[entry + 4 : entry + 8]).decode("latin-1")
    width, height = struct.unpack_from(">HH", data, entry + 32)  # VisualSampleEntry
    return kind, width, height


def build_mp4(init: bytes, fragments: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """One mp4 of `fragments` after `init`, frames numbered 0.. in this order, and the
    number of frames of each fragment.

    Only each fragment's `tfdt` changes (its decode time); the rest is concatenated as
    stored. Without composition offsets a fragment's decode time is the number of frames
    before it. A fragment with them (B-frames: presentation order != decode order) starts
    late enough that its first presented frame follows the previous fragment's last one,
    and its decode times follow the previous fragment's (gaps in time are harmless:
    decoders address frames by their rank in presentation order).
    """
    parts, counts = [init], []
    decode_time, last_shown = 0, -1  # next free decode time; largest presentation time yet
    for fragment in fragments:
        tfdt, version, count = _fragment_fields(fragment)
        lo, hi = presentation_span(fragment) if count else (0, -1)
        start = max(decode_time, last_shown + 1 - lo)
        moof_size = _U32.unpack_from(fragment)[0]
        header = bytearray(fragment[:moof_size])
        struct.pack_into(">Q" if version == 1 else ">I", header, tfdt + 12, start)
        parts += [header, memoryview(fragment)[moof_size:]]
        counts.append(count)
        decode_time, last_shown = start + count, start + hi
    return b"".join(parts), counts


def boxes(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(type, bytes) of each top-level box of an mp4 written by FFmpeg."""
    offset = 0
    while offset < len(data):
        size, kind = _BOX.unpack_from(data, offset)
        if size < 8:  # 64-bit and to-end sizes: FFmpeg writes neither for these boxes
            raise ValueError(f"unexpected mp4 box size {size} ({kind!r}) at byte {offset}")
        yield kind, data[offset : offset + size]
        offset += size


def _composition_offsets(fragment: bytes) -> list[int]:
    """Each sample's presentation offset in ticks (its decode index + its composition time
    offset), in decode order. Samples last one tick each (converters/fragments.py)."""
    moof_size = _U32.unpack_from(fragment)[0]
    offsets: list[int] = []
    for trun in _children(fragment, 8, moof_size, (b"traf", b"trun")):
        version, flags = fragment[trun + 8], int.from_bytes(fragment[trun + 9 : trun + 12], "big")
        count = _U32.unpack_from(fragment, trun + 12)[0]
        field = trun + 16 + 4 * bool(flags & 0x1) + 4 * bool(flags & 0x4)
        per_sample = sum(4 for bit in (0x100, 0x200, 0x400, 0x800) if flags & bit)
        cto_at = sum(4 for bit in (0x100, 0x200, 0x400) if flags & bit)
        for k in range(count):
            cto = 0
            if flags & 0x800:
                at = field + k * per_sample + cto_at
                cto = struct.unpack_from(">i" if version else ">I", fragment, at)[0]
            offsets.append(len(offsets) + cto)
    return offsets


def _children(data: bytes, offset: int, end: int, path: tuple[bytes, ...]) -> Iterator[int]:
    """Offsets of the boxes at `path` below the boxes in data[offset:end]."""
    while offset + 8 <= end:
        size, kind = _BOX.unpack_from(data, offset)
        if kind == path[0]:
            if len(path) == 1:
                yield offset
            else:
                yield from _children(data, offset + 8, offset + size, path[1:])
        offset += max(size, 8)


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
