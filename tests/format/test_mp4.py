"""GOP records as mp4 fragments (jaxload/format/mp4.py): real x264 packets muxed by FFmpeg,
decoded by torchcodec."""

from __future__ import annotations

import fractions
import io
from collections.abc import Iterable, Iterator

import numpy as np
import pytest

from jaxload.converters.fragments import fragment_gop
from jaxload.decode.frames import EncodedFrames, decode_gops, decode_grouped
from jaxload.format.mp4 import build_mp4, gop_num_frames

av = pytest.importorskip("av")
pytest.importorskip("torchcodec")

GOP, H, W = 4, 48, 64


def _x264(images: Iterable[np.ndarray], width: int, gop: int, bframes: int) -> list[av.Packet]:
    """x264's packets (Annex-B, decode order, SPS/PPS in-band) of RGB `images` H x width at
    10 fps, in closed GOPs of `gop` frames with up to `bframes` B-frames."""
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, H, "yuv420p"
    encoder.time_base = fractions.Fraction(1, 10)
    encoder.gop_size, encoder.max_b_frames = gop, bframes
    params = f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes={bframes}"
    encoder.options = {"x264-params": params}
    packets = []
    for i, image in enumerate(images):
        frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p")
        frame.pts = i
        packets += encoder.encode(frame)
    return packets + encoder.encode(None)


def encode_gops(seed: int, num_gops: int, width: int = W) -> list[list[bytes]]:
    """Annex-B packets of `num_gops` closed GOPs of GOP frames, no B-frames, SPS/PPS in-band."""
    rng = np.random.default_rng(seed)

    def images() -> Iterator[np.ndarray]:
        for i in range(GOP * num_gops):
            image = np.full((H, width, 3), 30 * (i % 8) + 10, np.uint8)
            image[: H // 2] = rng.integers(0, 255, size=3, dtype=np.uint8)
            yield image

    packets = _x264(images(), width, GOP, bframes=0)
    gops: list[list[bytes]] = []
    for packet in packets:
        if packet.is_keyframe:
            gops.append([])
        gops[-1].append(bytes(packet))
    return gops


def test_fragments_of_two_streams_decode_in_any_order_after_one_init():
    a, b = encode_gops(0, 3), encode_gops(1, 2)
    init_a, frags_a = zip(*(fragment_gop(g, "h264", W, H) for g in a))
    init_b, frags_b = zip(*(fragment_gop(g, "h264", W, H) for g in b))
    assert len(set(init_a)) == 1 and init_a[0] == init_b[0]  # same encoder settings
    assert [gop_num_frames(f) for f in frags_a] == [GOP] * 3
    alone = [decode_gops(init_a[0], [f], [range(GOP)], "h264", W, H)[0] for f in frags_a + frags_b]
    # Out of order, from two streams, one fragment twice: each decodes as it does alone.
    order = [4, 0, 2, 3, 0]
    gops = [(frags_a + frags_b)[i] for i in order]
    decoded = decode_gops(init_b[0], gops, [range(GOP), [3], [0, 2], [1], [3]], "h264", W, H)
    np.testing.assert_array_equal(decoded[0], alone[4])
    np.testing.assert_array_equal(decoded[1], alone[0][[3]])
    np.testing.assert_array_equal(decoded[2], alone[2][[0, 2]])
    np.testing.assert_array_equal(decoded[3], alone[3][[1]])
    np.testing.assert_array_equal(decoded[4], alone[0][[3]])
    assert not np.array_equal(alone[0], alone[3])  # the two streams' pictures differ


def test_build_mp4_numbers_frames_consecutively():
    (gop0, gop1) = encode_gops(2, 2)
    init, frag0 = fragment_gop(gop0, "h264", W, H)
    _, frag1 = fragment_gop(gop1, "h264", W, H)
    mp4, counts = build_mp4(init, [frag1, frag0, frag1])
    assert counts == [GOP, GOP, GOP]
    with av.open(io.BytesIO(mp4)) as container:
        pts = [p.pts for p in container.demux(video=0) if p.size]
    assert pts == list(range(3 * GOP))
    assert len(mp4) == len(init) + 2 * len(frag1) + len(frag0)  # only tfdt values change


def test_not_a_fragment_is_refused():
    init, _ = fragment_gop(encode_gops(3, 1)[0], "h264", W, H)
    with pytest.raises(ValueError, match="not an mp4 fragment"):
        build_mp4(init, [init])


def test_decode_grouped_shares_a_decoder_between_same_size_cameras_only():
    def camera(seed: int, width: int, rows: list[list[int]]) -> EncodedFrames:
        gops = encode_gops(seed, 2, width)
        init, fragments = zip(*(fragment_gop(g, "h264", width, H) for g in gops))
        slots = np.asarray(rows) // GOP
        return EncodedFrames.from_slots(
            list(fragments),
            slots,
            np.asarray(rows) % GOP,
            init=init[0],
            codec="h264",
            width=width,
            height=H,
        )

    a = camera(4, W, [[1, 5], [7, 0], [3, 3]])  # 3 samples, 2 frames each
    b = camera(5, W, [[6], [2], [0]])  # same size: decoded with a
    c = camera(6, 2 * W, [[4], [1], [5]])  # another size: its own decoder
    calls = []
    real = EncodedFrames.decode

    def counting(self, *args, **kwargs):
        calls.append(len(self.gops))
        return real(self, *args, **kwargs)

    EncodedFrames.decode = counting
    try:
        together = decode_grouped([a, b, c])
    finally:
        EncodedFrames.decode = real
    assert len(calls) == 2  # one decoder for a + b, one for c
    for video, frames in zip([a, b, c], together):
        np.testing.assert_array_equal(frames, video.decode())
        assert frames.shape == (*video.gop_index.shape, H, video.width, 3)


def _bframe_stream(seed: int, frames: int, gop: int = 8) -> tuple[list[bytes], list[int]]:
    """Annex-B packets (decode order) of x264 with 3 B-frames and closed GOPs of `gop`
    frames, and the frame each packet shows (presentation order)."""
    rng = np.random.default_rng(seed)
    images = (rng.integers(0, 255, size=(H, W, 3), dtype=np.uint8) for _ in range(frames))
    packets = _x264(images, W, gop, bframes=3)
    return [bytes(p) for p in packets], [int(p.pts) for p in packets]


def test_b_frame_fragments_present_their_frames_in_order_in_any_order():
    """Copied B-frame GOPs (composition offsets, packets out of presentation order): frame
    k of a fragment is its k-th frame shown, wherever build_mp4 puts the fragment."""
    from jaxload.converters.fragments import fragment_copied
    from jaxload.format.mp4 import presentation_span

    data, shown = _bframe_stream(4, 24)
    assert shown != sorted(shown)  # really reordered
    cuts = [k for k in range(len(data)) if k % 8 == 0]
    init, frags = fragment_copied(data, shown, cuts, "h264", W, H)
    assert [gop_num_frames(f) for f in frags] == [8, 8, 8]
    assert presentation_span(frags[1])[1] - presentation_span(frags[1])[0] == 7
    alone = [decode_gops(init, [f], [range(8)], "h264", W, H)[0] for f in frags]
    with av.open(io.BytesIO(build_mp4(init, frags)[0])) as container:
        reference = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    np.testing.assert_array_equal(np.concatenate(alone), np.stack(reference))
    decoded = decode_gops(
        init, [frags[2], frags[0], frags[2]], [[7, 0], range(8), [3]], "h264", W, H
    )
    np.testing.assert_array_equal(decoded[0], alone[2][[7, 0]])
    np.testing.assert_array_equal(decoded[1], alone[0])
    np.testing.assert_array_equal(decoded[2], alone[2][[3]])
