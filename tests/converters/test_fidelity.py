"""converters/fidelity.py: `--min-psnr` picks, per camera, the largest crf whose encode of
a sample of the source's frames reaches the target on every sampled frame."""

from __future__ import annotations

import dataclasses

from jaxload.converters import video
from jaxload.converters.fidelity import _sample_episodes, _source_frames, choose_crfs
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.converters.options import encode_options

CAMERA = "observation.images.top"


def test_the_sample_is_first_middle_and_last():
    assert _sample_episodes([4]) == [4]
    assert _sample_episodes([4, 9]) == [4, 9]
    assert _sample_episodes(list(range(10, 21))) == [10, 15, 20]


def test_the_chosen_crf_is_the_largest_meeting_the_target(small_v3):
    source = LeRobotV3Source(small_v3)
    options = encode_options("h264", None, None, None, 36.0)
    ((camera, crf),) = choose_crfs(source, [1], options)  # 3 frames: quick to encode
    assert camera == CAMERA and 0 < crf < 51
    frames = _source_frames(source, 1, CAMERA)

    def worst(crf):
        trial = dataclasses.replace(options, crf=crf, min_psnr=None)
        return video.transcode(iter(frames), trial, source.fps, where="t").psnr.min()

    assert worst(crf) >= 36.0 > worst(crf + 1)


def test_no_target_no_choice(small_v3):
    source = LeRobotV3Source(small_v3)
    for codec, crf in (("auto", None), ("h264", 20), ("lossless", None)):
        assert choose_crfs(source, [0], encode_options(codec, None, crf, None, None)) == ()
