"""The decode seam (jaxload.decode.backend): torchcodec by default, another backend for a
block of code and the previous one back afterwards (also after an error, also nested), and
frames in the order asked for. Real mp4s of a converted dataset, decoded by torchcodec;
CUDA decode (NVDEC) needs a GPU: tests/decode/test_nvdec.py."""

import threading

import numpy as np
import pytest

import jaxload
from jaxload.decode import backend
from jaxload.decode.backend import TorchcodecBackend
from jaxload.format.mp4 import build_mp4
from tests.support.lerobot_factory import decode_frame_leds


class Recording(TorchcodecBackend):
    def __init__(self, name):
        self.name, self.opened = name, []

    def open(self, mp4, device):
        self.opened.append(device)
        return super().open(mp4, device)


def test_the_default_is_torchcodec_and_use_restores_the_previous_backend():
    default = backend.current()
    assert isinstance(default, TorchcodecBackend)
    outer, inner = Recording("outer"), Recording("inner")
    with backend.use(outer) as got:
        assert got is outer and backend.current() is outer
        with pytest.raises(RuntimeError, match="boom"), backend.use(inner):
            assert backend.current() is inner
            raise RuntimeError("boom")
        assert backend.current() is outer  # the inner block ended with an error
    assert backend.current() is default


def test_the_backend_is_process_wide_read_threads_decode_through_it(dataset):
    ds = jaxload.open(dataset)
    recording = Recording("threads")
    with backend.use(recording):
        thread = threading.Thread(target=ds.__getitems__, args=([0, 1],))
        thread.start()
        thread.join()
    assert recording.opened == ["cpu"] * 2  # one decoder per camera, opened by the thread


def test_frames_come_in_the_order_asked_for_repeats_included(dataset):
    video = jaxload.open(dataset).read_encoded([0])[1]["observation.images.top"]
    mp4, counts = build_mp4(video.init, video.gops)
    assert list(counts) == [4]
    frames = TorchcodecBackend().open(mp4, "cpu").frames_at([2, 0, 2, 3])
    assert tuple(frames.shape) == (4, 48, 64, 3) and str(frames.dtype) == "torch.uint8"
    assert [decode_frame_leds(f) for f in frames.numpy()] == [2, 0, 2, 3]
    np.testing.assert_array_equal(frames[0].numpy(), frames[2].numpy())
