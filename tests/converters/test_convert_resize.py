"""`jaxload convert --resize HxW` / `--max-size N` (issue 34): cameras stored smaller, video
and `image` cameras alike, fidelity measured against the resized source, the resize
recorded in info.json and shown by `jaxload info`; bad values refused before anything is
written."""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest

import jaxload
from jaxload.cli import main
from jaxload.converters.options import encode_options
from jaxload.errors import JaxloadError
from tests.support.lerobot_factory import render_frame, write_lerobot_v3

CAMERAS = {"observation.images.top": (48, 64)}
IMAGES = {"observation.images.wrist": (60, 80)}


def test_bad_sizes_are_refused_naming_the_flag():
    cases = {
        ("h264", "24x33", None): "needs even sizes; use 24x34",
        ("h264", "24", None): "give HEIGHTxWIDTH",
        ("h264", "0x8", None): "at least 2",
        ("copy", "24x32", None): "--resize with --video-codec copy",
        ("h264", "24x32", 40): "give one",
        ("h264", None, 1): "--max-size 1",
    }
    for (codec, resize, max_size), message in cases.items():
        with pytest.raises(JaxloadError, match=message):
            encode_options(codec, 4, None, None, None, resize, max_size)
    options = encode_options("lossless", 4, None, None, None, "23x31")  # RGB: any size
    assert options.stored_size(480, 640) == (23, 31)
    bounded = encode_options("h264", 4, None, None, None, None, 224)
    assert bounded.stored_size(480, 640) == (168, 224) and bounded.stored_size(96, 128) == (96, 128)


@pytest.mark.integration
def test_resize_stores_less_and_records_it(tmp_path, capsys):
    src = write_lerobot_v3(
        tmp_path / "src", episode_lengths=(6, 5), cameras=CAMERAS, image_cameras=IMAGES
    )
    out = tmp_path / "small"
    assert main(["convert", str(src), str(out), "--resize", "24x32", "--workers", "1",
                 "--no-progress"]) == 0  # fmt: skip
    ds = jaxload.open(out)
    assert {k: (c.height, c.width) for k, c in ds.info.cameras.items()} == {
        "observation.images.top": (24, 32),
        "observation.images.wrist": (24, 32),
    }
    converter = ds.info.converter
    assert converter["resize"] == "24x32"
    assert converter["camera_source_sizes"] == {
        "observation.images.top": [48, 64],
        "observation.images.wrist": [60, 80],
    }
    for cam, psnr in converter["fidelity_psnr_db"].items():
        assert psnr["min"] > 30, (cam, psnr)  # against the resized source
    frame = ds[7]["observation.images.top"]  # episode 1, frame 1
    assert frame.shape == (24, 32, 3)
    source = render_frame(48, 64, 1, 1, camera_index=0)
    want = cv2.resize(source, (32, 24), interpolation=cv2.INTER_AREA)
    # the source video's own loss (crf 30) included; another frame is ~10x further off
    assert np.abs(frame.astype(int) - want).mean() < 10
    other = cv2.resize(
        render_frame(48, 64, 0, 4, camera_index=0), (32, 24), interpolation=cv2.INTER_AREA
    )
    assert np.abs(frame.astype(int) - other).mean() > np.abs(frame.astype(int) - want).mean()
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "h264 24x32" in shown and "resized from 48x64 (--resize 24x32)" in shown
    assert re.search(
        r"re-encoded: PSNR vs source min \d+\.\d\d dB, mean \d+\.\d\d dB$", shown, re.M
    )

    bounded = tmp_path / "bounded"
    assert main(["convert", str(src), str(bounded), "--max-size", "40", "--workers", "1",
                 "--no-progress"]) == 0  # fmt: skip
    info = jaxload.open(bounded).info
    assert (
        info.cameras["observation.images.top"].height,
        info.cameras["observation.images.top"].width,
    ) == (30, 40)
    assert info.converter["max_size"] == 40 and info.converter["resize"] is None
    assert (
        info.cameras["observation.images.wrist"].height,
        info.cameras["observation.images.wrist"].width,
    ) == (30, 40)
    before = jaxload.open(tmp_path / "small").info.fingerprint
    assert main(["convert", str(src), str(tmp_path / "odd"), "--resize", "24x33"]) == 1
    assert not (tmp_path / "odd").exists()  # nothing written
    assert jaxload.open(tmp_path / "small").info.fingerprint == before


@pytest.mark.parametrize("bound", [83, 84, 3, 2, 41, 225])
def test_max_size_keeps_the_longer_side_within_the_bound(bound):
    """Issue #44: --max-size 83 stored 84x84 and --max-size 3 4x4 (sizes rounded to even,
    up): the largest even size <= N is the bound now, for every shape."""
    options = encode_options("h264", 4, None, None, None, None, bound)
    assert options.max_size == bound - bound % 2
    for height, width in [(480, 640), (640, 480), (96, 96), (97, 301), (1080, 1920), (2, 999)]:
        stored = options.stored_size(height, width)
        assert max(stored) <= bound and min(stored) >= 2 and stored[0] % 2 == stored[1] % 2 == 0
        if max(height, width) > bound:
            assert max(stored) == bound - bound % 2


def test_a_resize_larger_than_the_encoders_take_is_refused_naming_the_limit(tmp_path, capsys):
    """Issue #44: `--resize 100000x100000` was "unexpected error ... ArgumentError 22"."""
    for size in ["100000x100000", "8194x64", "8192x8192"]:
        with pytest.raises(JaxloadError, match=rf"--resize '{size}': larger than H.264/HEVC"):
            encode_options("h264", 4, None, None, None, size)
    assert encode_options("h264", 4, None, None, None, "4320x8192").resize == (4320, 8192)
    out = tmp_path / "out"
    assert main(["convert", str(tmp_path), str(out), "--resize", "100000x100000"]) == 1
    assert "larger than H.264/HEVC encode (8192 pixels a side" in capsys.readouterr().err
    assert not out.exists()
