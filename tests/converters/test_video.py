"""Cutting a source's packets into GOP records for copying (converters/video.copy_cuts):
records start only on keyframes of closed GOPs; an episode that starts inside a GOP, or
whose frames are not one run of packets, is refused with the file and episode named."""

import pytest

from jaxload.converters.video import copy_cuts
from jaxload.errors import SourceError


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
