"""converters/video.py: encode options per camera, decoding a source episode's frames,
the transcode into fixed GOPs, copying the source stream, and cutting a source's packets
into GOP records for copying (`copy_cuts`: records start only on keyframes of closed GOPs;
an episode that starts inside a GOP, or whose frames are not one run of packets, is
refused with the file and episode named)."""

import numpy as np
import pytest

from jaxload.converters.files import LocalFiles
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.converters.video import (
    EncodeOptions,
    copy_cuts,
    copy_stream,
    decode_source_frames,
    mux_codec,
    psnr,
    transcode,
)
from jaxload.decode.frames import decode_gops
from jaxload.errors import SourceError
from tests.support.lerobot_factory import decode_frame_leds


def _packets(pts, keys, inside=None):
    inside = inside if inside is not None else [True] * len(pts)
    return [(p / 30, k, bytes([i]), w) for i, (p, k, w) in enumerate(zip(pts, keys, inside))]


def test_closed_b_frame_gops_are_cut_at_each_keyframe():
    pts = [0, 3, 1, 2, 4, 7, 5, 6]
    keys = [True, False, False, False, True, False, False, False]
    data, shown, cuts = copy_cuts(_packets(pts, keys), 8, "f.mp4: episode 0")
    assert (shown, cuts) == (pts, [0, 4])
    assert data == [bytes([i]) for i in range(8)]


def test_an_open_gop_joins_the_record_of_the_gop_its_leading_frames_reference():
    # The keyframe at packet 4 (shown 6) is followed by frames shown before it (4, 5): they
    # reference the GOP before, so the records are cut only at the closed keyframe (8).
    pts = [0, 3, 1, 2, 6, 4, 5, 7, 8, 9]
    keys = [True, False, False, False, True, False, False, False, True, False]
    _, _, cuts = copy_cuts(_packets(pts, keys), 10, "f.mp4: episode 0")
    assert cuts == [0, 8]


def test_an_episode_starting_inside_a_gop_is_refused():
    pts = [0, 1, 2, 3]
    keys = [True, False, False, False]
    with pytest.raises(SourceError, match=r"f\.mp4: episode 2 does not start on a keyframe"):
        copy_cuts(_packets(pts, keys, [False, True, True, True]), 3, "f.mp4: episode 2")


def test_an_episode_starting_on_a_leading_frame_is_refused():
    # A keyframe whose episode frame is shown after a frame decoded before it.
    pts = [0, 2, 1, 3]
    keys = [True, True, False, False]
    with pytest.raises(SourceError, match="closed GOP"):
        copy_cuts(_packets(pts, keys, [False, True, True, True]), 3, "f.mp4: episode 2")


def test_packet_count_and_interleaving_are_checked():
    with pytest.raises(SourceError, match="video too short: found 2 packets for 3 frames"):
        copy_cuts(_packets([0, 1], [True, False]), 3, "f.mp4: episode 0")
    with pytest.raises(SourceError, match="interleaved"):
        copy_cuts(_packets([0, 1, 2], [True, False, False], [True, False, True]), 2, "e")


# --------------------------------------------------------------------------- options
def test_stored_size_keeps_resizes_or_caps_the_longer_side():
    assert EncodeOptions().stored_size(48, 64) == (48, 64)
    assert EncodeOptions(resize=(20, 30)).stored_size(48, 64) == (20, 30)
    assert EncodeOptions(max_size=64).stored_size(48, 64) == (48, 64)
    # 32/64 of 48x64, sides rounded to even; never below 2
    assert EncodeOptions(max_size=32).stored_size(48, 64) == (24, 32)
    assert EncodeOptions(max_size=30).stored_size(45, 63) == (22, 30)
    assert EncodeOptions(max_size=2).stored_size(10, 640) == (2, 2)


def test_settings_leave_out_unset_resize_fields():
    assert "resize" not in EncodeOptions().settings()
    assert "max_size" not in EncodeOptions().settings()
    settings = EncodeOptions(resize=(2, 4), camera_crf=(("a", 20),)).settings()
    assert settings["resize"] == [2, 4] and settings["camera_crf"] == [["a", 20]]


def test_for_camera_copies_what_the_readers_decode_and_reencodes_the_rest():
    auto = EncodeOptions(tune="fastdecode")
    assert auto.for_camera("c", source_codec="av1").codec == "copy"
    assert auto.for_camera("c", source_codec="av1").tune == ""
    assert auto.for_camera("c", source_codec="vp9").codec == "h264"
    assert auto.for_camera("c", source_codec="vp9").tune == "fastdecode"
    # an image camera has no stream to copy: lossless, full chroma
    image = auto.for_camera("c", image=True)
    assert (image.codec, image.stored_codec) == ("lossless", "h264rgb")
    h264 = EncodeOptions(codec="h264", image_min_psnr=40.0, camera_crf=(("c", 9),))
    assert h264.for_camera("c", image=True).stored_codec == "h264-yuv444p"
    assert h264.for_camera("c", image=True).min_psnr == 40.0
    assert (h264.for_camera("c").crf, h264.for_camera("d").crf) == (9, 14)


def test_target_only_for_reencodes():
    assert EncodeOptions(codec="copy", min_psnr=40).target(image=False) is None
    assert EncodeOptions(codec="h264", min_psnr=35).target(image=True) == 35
    assert EncodeOptions(codec="h264", image_min_psnr=41).target(image=True) == 41
    assert EncodeOptions(codec="h264", image_min_psnr=41).target(image=False) is None


def test_mux_codec_names():
    assert [mux_codec(c) for c in ("h264rgb", "h264-yuv444p", "hevc-yuv444p", "av1")] == [
        "h264",
        "h264",
        "hevc",
        "av1",
    ]


def test_psnr():
    a = np.zeros((4, 4, 3), np.uint8)
    assert psnr(a, a) == float("inf")
    b = a.copy()
    b[0, 0, 0] = 255  # mse = 255^2 / 48
    assert psnr(a, b) == pytest.approx(10 * np.log10(48))


# --------------------------------------------------------------------------- real video
def _span(src, episode):
    source = LeRobotV3Source(LocalFiles(src))
    span = source.video_span(episode, "observation.images.top")
    length = source.episode(episode).length
    return src / span.rel, span, [k / source.fps for k in range(length)]


def test_decode_source_frames_picks_the_episodes_frames(small_v3):
    path, span, times = _span(small_v3, 1)
    frames = list(decode_source_frames(path, span.from_timestamp, times, episode=1))
    assert [decode_frame_leds(f.to_ndarray(format="rgb24")) for f in frames] == [0, 1, 2]
    # frames decoded from the keyframe before the first query are skipped
    frames = list(decode_source_frames(path, span.from_timestamp, times[1:], episode=1))
    assert [decode_frame_leds(f.to_ndarray(format="rgb24")) for f in frames] == [1, 2]


def test_decode_source_frames_names_file_and_episode_on_a_gap_or_a_short_file(small_v3):
    path, span, times = _span(small_v3, 1)
    with pytest.raises(SourceError, match=r"file-000\.mp4: episode 1: no frame at"):
        list(decode_source_frames(path, span.from_timestamp + 0.05, times, episode=1))
    with pytest.raises(SourceError, match=r"episode 1: video too short"):
        list(decode_source_frames(path, span.from_timestamp, [*times, 0.3, 0.4], episode=1))
    with pytest.raises(SourceError, match=r"nothing\.mp4: episode 7: cannot open video"):
        list(decode_source_frames(path.with_name("nothing.mp4"), 0, times, episode=7))


def test_transcode_cuts_fixed_gops_that_decode_alone(small_v3):
    path, span, times = _span(small_v3, 0)
    frames = decode_source_frames(path, span.from_timestamp, times, episode=0)
    stream = transcode(frames, EncodeOptions(codec="h264", gop=2, crf=10), 10, where="w")
    assert stream.codec == "h264" and stream.segment_starts == [0, 2, 4]
    assert len(stream.records) == 4 and stream.records[0] == stream.init
    assert len(stream.psnr) == 5 and stream.psnr.min() > 35
    decoded = np.concatenate(
        decode_gops(stream.init, stream.segments, [range(2), range(2), range(1)], "h264", 64, 48)
    )
    assert [decode_frame_leds(f) for f in decoded] == [0, 1, 2, 3, 4]


def test_transcode_resizes_and_refuses_odd_yuv420p_and_no_frames(small_v3):
    path, span, times = _span(small_v3, 0)
    frames = decode_source_frames(path, span.from_timestamp, times[:2], episode=0)
    stream = transcode(frames, EncodeOptions(codec="h264", resize=(24, 32)), 10, where="w")
    assert decode_gops(stream.init, stream.segments, [range(2)], "h264", 32, 24)[0].shape == (
        2,
        24,
        32,
        3,
    )
    frames = decode_source_frames(path, span.from_timestamp, times[:1], episode=0)
    with pytest.raises(SourceError, match=r"where: 33x24 frames cannot be stored as yuv420p"):
        transcode(frames, EncodeOptions(codec="h264", resize=(24, 33)), 10, where="where")
    with pytest.raises(SourceError, match="where: no frames to encode"):
        transcode(iter([]), EncodeOptions(codec="h264"), 10, where="where")


def test_copy_stream_keeps_the_source_packets_and_frames(small_v3):
    path, span, times = _span(small_v3, 1)
    stream = copy_stream(path, span.from_timestamp, span.to_timestamp, times, episode=1)
    assert stream.codec == "h264" and stream.segment_starts[0] == 0
    assert np.isinf(stream.psnr).all() and len(stream.psnr) == 3
    counts = np.diff([*stream.segment_starts, 3])
    decoded = np.concatenate(
        decode_gops(stream.init, stream.segments, [range(n) for n in counts], "h264", 64, 48)
    )
    assert [decode_frame_leds(f) for f in decoded] == [0, 1, 2]
