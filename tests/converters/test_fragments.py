"""converters/fragments.py: a GOP's packets muxed, without re-encoding, into an init
segment and one mp4 fragment that the reader decodes on its own (a fragment per closed
GOP for a copied stream); packets that do not make one fragment per GOP are refused."""

from __future__ import annotations

import os

import av
import numpy as np
import pytest

from jaxload.converters import fragments, video
from jaxload.converters.fragments import fragment_copied, fragment_gop
from jaxload.decode.frames import decode_gops
from jaxload.format.mp4 import gop_num_frames
from tests.support.lerobot_factory import decode_frame_leds, render_frame

HEIGHT, WIDTH = 48, 64


@pytest.fixture(scope="module")
def packets():
    """6 frames encoded by libx264 in GOPs of 2, Annex-B with in-band parameter sets."""
    options = video.EncodeOptions(codec="h264", gop=2, crf=10)
    encoder = video._make_encoder(options, 10, WIDTH, HEIGHT, "test")
    out = []
    for i in range(6):
        frame = av.VideoFrame.from_ndarray(render_frame(HEIGHT, WIDTH, 0, i), format="rgb24")
        frame = frame.reformat(format="yuv420p")
        frame.pts, frame.time_base = i, encoder.time_base
        out += encoder.encode(frame)
    out += encoder.encode(None)
    assert [p.is_keyframe for p in out] == [True, False] * 3
    return [bytes(p) for p in out]


def _leds(init, gops, counts):
    decoded = decode_gops(init, gops, [range(n) for n in counts], "h264", WIDTH, HEIGHT)
    return [decode_frame_leds(f) for f in np.concatenate(decoded)]


def test_each_gop_is_a_fragment_that_decodes_after_the_shared_init(packets):
    pieces = [fragment_gop(packets[i : i + 2], "h264", WIDTH, HEIGHT) for i in (0, 2, 4)]
    inits = {init for init, _ in pieces}
    assert len(inits) == 1  # the same init segment for every GOP of the stream
    (init,) = inits
    gops = [fragment for _, fragment in pieces]
    assert [gop_num_frames(g) for g in gops] == [2, 2, 2]
    assert _leds(init, gops[1:2], [2]) == [2, 3]  # a GOP alone
    assert _leds(init, gops, [2, 2, 2]) == [0, 1, 2, 3, 4, 5]


def test_a_fragment_holds_every_packet_given(packets):
    # only the first packet is muxed as a keyframe: one fragment, whatever it holds
    init, fragment = fragment_gop(packets[:4], "h264", WIDTH, HEIGHT)
    assert gop_num_frames(fragment) == 4 and _leds(init, [fragment], [4]) == [0, 1, 2, 3]


def test_a_copied_run_is_cut_at_the_given_keyframes(packets):
    init, gops = fragment_copied(packets, list(range(6)), [0, 2, 4], "h264", WIDTH, HEIGHT)
    assert [gop_num_frames(g) for g in gops] == [2, 2, 2]
    assert _leds(init, gops[2:], [2]) == [4, 5]
    init, gops = fragment_copied(packets, list(range(6)), [0, 4], "h264", WIDTH, HEIGHT)
    assert [gop_num_frames(g) for g in gops] == [4, 2]
    assert _leds(init, gops, [4, 2]) == [0, 1, 2, 3, 4, 5]


def test_svt_log_is_quieted_only_when_unset(monkeypatch):
    monkeypatch.delenv("SVT_LOG", raising=False)
    with fragments._quiet_svt():
        assert os.environ["SVT_LOG"] == "1"
    assert "SVT_LOG" not in os.environ
    monkeypatch.setenv("SVT_LOG", "4")
    with fragments._quiet_svt():
        assert os.environ["SVT_LOG"] == "4"
    assert os.environ["SVT_LOG"] == "4"
