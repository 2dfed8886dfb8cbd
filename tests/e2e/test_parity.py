"""Parity with LeRobotDataset.__getitem__ on datasets written by lerobot itself (0.4.4:
AV1 multi-file, H.264, tabular-only, `image`-dtype cameras; 0.6.1: AV1).

The goldens hold what LeRobot returned (float32 CHW images in [0, 1]); jaxload returns
uint8 HWC, so images are converted before comparing. Everything must be identical with
the default conversion (video cameras keep the source's bitstream, image cameras are
stored lossless); images of the `h264` re-encode must be within PSNR 38 dB of LeRobot's
decode (the transcode's bound).
"""

import json

import numpy as np
import pytest

import jaxload
from jaxload.converters.convert import convert
from tests.support.helpers import psnr

pytestmark = pytest.mark.processes  # the fixtures convert with 2 worker processes

DATASETS = ["av1_multi", "h264_single", "tabular_only", "image_dtype", "v061_av1"]
REENCODED = ["av1_multi", "h264_single"]  # --video-codec h264: a second lossy generation
MIN_PSNR_DB = 38.0


@pytest.fixture(scope="module")
def converted(shared_lerobot, tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    out = {
        name: convert(shared_lerobot / name, root / name, workers=2, progress=False).out
        for name in DATASETS
    }
    for name in REENCODED:
        out[name + "/h264"] = convert(
            shared_lerobot / name,
            root / f"{name}_h264",
            video_codec="h264",
            workers=2,
            progress=False,
        ).out
    return out


def _golden(shared_lerobot, name):
    meta = json.loads((shared_lerobot / "golden" / f"{name}.json").read_text())
    arrays = np.load(shared_lerobot / "golden" / f"{name}.npz")
    return meta, arrays


@pytest.mark.parametrize("name", DATASETS + [f"{n}/h264" for n in REENCODED])
@pytest.mark.parametrize("variant", ["", "_nodelta"])
def test_matches_lerobot_goldens(shared_lerobot, converted, name, variant):
    source, _, mode = name.partition("/")
    meta, arrays = _golden(shared_lerobot, source + variant)
    ds = jaxload.open(converted[name], delta_timestamps=meta["delta_timestamps"])
    assert len(ds) == meta["num_frames"]
    worst = np.inf
    for index in meta["indices"]:
        sample = ds[index]
        expected = meta["items"][str(index)]
        assert sample["task"] == expected["task"]
        assert set(sample) - {"task"} == set(expected["keys"]), index
        for key in expected["keys"]:
            ref = arrays[f"{index}/{key}"]
            got = sample[key]
            if key in meta["image_keys"]:
                ref_hwc = np.moveaxis(ref, -3, -1) * 255.0
                assert got.dtype == np.uint8 and got.shape == ref_hwc.shape, (index, key)
                if mode != "h264":  # the default: exact
                    np.testing.assert_array_equal(
                        got, np.rint(ref_hwc).astype(np.uint8), err_msg=f"{index} {key}"
                    )
                worst = min(worst, psnr(got, ref_hwc))
            else:
                assert got.dtype == ref.dtype and got.shape == ref.shape, (index, key)
                np.testing.assert_array_equal(got, ref, err_msg=f"index {index}, key {key}")
    assert worst >= MIN_PSNR_DB, f"worst image PSNR {worst:.2f} dB"


def test_frame_leds_show_the_right_frame(shared_lerobot, converted):
    """Every decoded frame of every episode is the frame it claims to be (LEDs = frame_index)."""
    from tests.support.lerobot_factory import decode_frame_leds

    ds = jaxload.open(converted["av1_multi"])
    samples = ds.__getitems__(range(len(ds)))
    for s in samples:
        for cam in ds.camera_keys:
            assert decode_frame_leds(s[cam]) == int(s["frame_index"]) % 256, (s["index"], cam)
