"""The decode-in-the-training-process path, tested on CPU (no GPU exists here).

On a GPU the same code decodes with torchcodec on "cuda:<i>" (NVDEC); here the devices
are CPU devices, which exercises the same hand-off: encoded frames from the reader, one
decoder per camera, DLPack into JAX without a copy. Per-device shards of a global array
are tested with the loader (tests/pipeline/test_loader_lerobot.py, decode_device="device").
"""

import numpy as np
import pytest
import torch

import jaxload
from jaxload.decode.on_device import to_jax
from jaxload.placement.device import probe_decode, probe_torchcodec_cuda
from tests.decode.conftest import CAMERAS, WINDOWS


def test_probe_decode_runs_the_reader_path_on_cpu(dataset):
    # decode_device="auto" probes CUDA with this same path; on CPU it must simply work.
    for camera in CAMERAS:
        probe_decode(str(dataset), camera, "cpu")
    # No GPU here; on a GPU host (scripts/gpu_check.sh) torchcodec's CUDA build decodes it.
    cuda = torch.cuda.is_available()
    assert probe_torchcodec_cuda(str(dataset), "observation.images.top") is cuda


def test_a_read_plan_is_used_only_for_its_own_positions(dataset):
    # The lookahead plans a batch's reads ahead and hands the plan to the read; a plan of
    # other positions (a stale one) must not change what is read.
    ds = jaxload.open(dataset, delta_timestamps=WINDOWS)
    positions, other = [3, 40, 13], [4, 41, 14]

    def decoded(*args, **kwargs):
        bare, videos = ds.read_encoded(*args, **kwargs)
        return [s["frame_index"] for s in bare], {k: v.decode() for k, v in videos.items()}

    want = decoded(positions)
    for plan in (ds.plan_read(positions), ds.plan_read(other)):
        got = decoded(positions, plan=plan)
        assert got[0] == want[0]
        for cam in want[1]:
            np.testing.assert_array_equal(got[1][cam], want[1][cam])
    keys = ds.plan_read(positions).record_keys()
    assert keys.shape[1] == 2 and (np.diff(keys[:, 0] << 40 | keys[:, 1]) > 0).all()


def test_dlpack_hand_off_is_zero_copy(dataset):
    ds = jaxload.open(dataset)
    _, videos = ds.read_encoded([3, 4, 5])
    frames = videos["observation.images.top"].decode(as_torch=True)
    array = to_jax(frames)
    assert array.unsafe_buffer_pointer() == frames.data_ptr()
    np.testing.assert_array_equal(np.asarray(array), frames.numpy())
    with pytest.raises(ValueError, match="contiguous"):
        to_jax(frames[:, :, 1:])
