"""converters/episode.py: one source episode converted: its rows as frame blocks, each
camera copied (the default) or re-encoded, a PSNR target met by lowering the crf, records
in storage order; an empty video is refused naming it and the episode."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from jaxload.converters.episode import convert_episode
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.converters.options import encode_options
from jaxload.errors import SourceError
from jaxload.format import frame_dtype
from tests.converters.conftest import source_features
from tests.support.lerobot_factory import frame_state

CAMERA = "observation.images.top"
VIDEO = "videos/observation.images.top/chunk-000/file-000.mp4"


def test_an_episode_is_its_rows_and_its_copied_stream(small_v3):
    source = LeRobotV3Source(small_v3)
    features = source_features(source)
    result = convert_episode(source, 1, encode_options(None, None, None, None, None), features)
    assert (result.episode_index, result.length, result.dataset_from_index) == (1, 3, 5)
    assert result.tasks == list(source.episode(1).tasks)
    rows = np.frombuffer(b"".join(result.frames), frame_dtype(features))
    assert rows["observation.state"][:, 0].tolist() == [frame_state(1, t) for t in range(3)]
    stream = result.streams[CAMERA]
    assert stream.codec == "h264" and np.isinf(stream.psnr).all()  # copied: exact
    assert result.record_blocks() == [result.frames, stream.records]


def test_a_psnr_target_lowers_the_crf_until_every_frame_meets_it(small_v3):
    source = LeRobotV3Source(small_v3)
    features = source_features(source)
    coarse = encode_options("h264", 2, 45, None, None)
    worst = convert_episode(source, 0, coarse, features).streams[CAMERA].psnr.min()
    target = encode_options("h264", 2, None, None, float(np.floor(worst)) + 3)
    target = dataclasses.replace(target, crf=45)  # start where it misses
    stream = convert_episode(source, 0, target, features).streams[CAMERA]
    assert stream.psnr.min() >= target.min_psnr > worst


def test_an_empty_video_is_named(small_v3, tmp_path):
    root = shutil.copytree(small_v3, tmp_path / "src")
    (root / VIDEO).write_bytes(b"")
    source = LeRobotV3Source(root)
    options = encode_options(None, None, None, None, None)
    with pytest.raises(SourceError, match=r"file-000\.mp4: empty file \(video of episode 0\)"):
        convert_episode(source, 0, options, source_features(source))
