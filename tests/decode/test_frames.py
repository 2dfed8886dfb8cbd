"""A batch's compressed frames (jaxload.decode.frames.EncodedFrames) and their decode: the
frames of the samples they were read for, one decoder per codec and size, rows selected
with their GOPs only, and a GOP table that does not match its records refused naming the
camera. Real converted mp4 GOP records, decoded by torchcodec."""

import dataclasses

import numpy as np
import pytest

import jaxload
from jaxload.decode import backend
from jaxload.decode.backend import TorchcodecBackend
from jaxload.decode.frames import EncodedFrames, decode_gops, decode_grouped
from jaxload.errors import DatasetError
from tests.decode.conftest import CAMERAS, WINDOWS
from tests.support.lerobot_factory import decode_frame_leds


def test_encoded_frames_decode_to_the_samples_frames(dataset):
    ds = jaxload.open(dataset, delta_timestamps=WINDOWS)
    positions = [0, 5, 13, 40, 53, 20]
    samples = ds.__getitems__(positions)
    bare, videos = ds.read_encoded(positions)
    assert "observation.images.top" not in bare[0]
    top = videos["observation.images.top"].decode()
    wrist = videos["observation.images.wrist"].decode()
    assert top.shape == (6, 2, 48, 64, 3) and wrist.shape == (6, 1, 40, 72, 3)
    for b, s in enumerate(samples):
        np.testing.assert_array_equal(top[b], s["observation.images.top"])
        np.testing.assert_array_equal(wrist[b, 0], s["observation.images.wrist"])
        assert decode_frame_leds(wrist[b, 0]) == int(s["frame_index"])


class CountingBackend(TorchcodecBackend):
    """The real torchcodec backend, counting the decoders opened (the decode seam)."""

    def __init__(self):
        self.opened = []

    def open(self, mp4, device):
        self.opened.append(device)
        return super().open(mp4, device)


def test_one_decoder_per_camera_size_per_batch(dataset):
    ds = jaxload.open(dataset, delta_timestamps=WINDOWS)
    with backend.use(CountingBackend()) as counting:
        ds.__getitems__(list(range(0, 54, 2)))  # 27 samples spread over every GOP
    assert counting.opened == ["cpu"] * len(CAMERAS)  # the two cameras differ in size


def test_a_frame_past_its_gop_record_is_refused_naming_the_camera(dataset):
    """A frame index the GOP table placed past the end of its GOP record (the record holds
    4 frames at GOP 4) would be the next GOP's frame, or a raw IndexError of the decoder."""

    ds = jaxload.open(dataset)
    _, videos = ds.read_encoded([0, 1])
    video = videos["observation.images.top"]
    wrong = dataclasses.replace(video, frame_index=video.frame_index + 4)
    with pytest.raises(DatasetError, match=r"camera observation\.images\.top, .*frame 4 of a GOP "
                       r"record holding 4 frames was asked for"):  # fmt: skip
        wrong.decode()


def test_select_keeps_only_the_rows_gops(dataset):
    ds = jaxload.open(dataset, delta_timestamps=WINDOWS)
    _, videos = ds.read_encoded([0, 1, 40, 41])
    video = videos["observation.images.top"]
    part = video.select(slice(2, 4))
    assert len(part.gops) < len(video.gops)
    np.testing.assert_array_equal(part.decode(), video.decode()[2:4])


def _top(dataset, positions):
    return jaxload.open(dataset).read_encoded(positions)[1]["observation.images.top"]


def test_frames_of_several_reads_concatenate_and_decode_as_each_alone(dataset):
    a, b = _top(dataset, [0, 1, 2]), _top(dataset, [40, 13])
    both = EncodedFrames.concat([a, b])
    assert both.gop_index.shape == (5,) and len(both.gops) == len(a.gops) + len(b.gops)
    np.testing.assert_array_equal(
        both.decode(), np.concatenate([a.decode(), b.decode()]).reshape(5, 48, 64, 3)
    )
    wrist = jaxload.open(dataset).read_encoded([0])[1]["observation.images.wrist"]
    with pytest.raises(ValueError, match=r"one codec and size: \w+ 64x48 vs \w+ 72x40"):
        EncodedFrames.concat([a, wrist])


def test_decode_grouped_gives_each_video_its_own_shape_with_one_decoder_per_size(dataset):
    ds = jaxload.open(dataset, delta_timestamps=WINDOWS)
    _, videos = ds.read_encoded([0, 5, 13])
    _, more = ds.read_encoded([40])
    order = [videos["observation.images.top"], more["observation.images.wrist"]]
    order += [videos["observation.images.wrist"], more["observation.images.top"]]
    with backend.use(CountingBackend()) as counting:
        out = decode_grouped(order)
    assert counting.opened == ["cpu", "cpu"]  # two sizes, two decoders for four videos
    assert [o.shape for o in out] == [
        (3, 2, 48, 64, 3),
        (1, 1, 40, 72, 3),
        (3, 1, 40, 72, 3),
        (1, 2, 48, 64, 3),
    ]
    for got, video in zip(out, order):
        np.testing.assert_array_equal(got, video.decode())


def test_decode_gops_decodes_the_frames_asked_of_each_gop(dataset):
    video = _top(dataset, [0, 4, 8])  # frames 0 of three GOPs of episode 0
    assert len(video.gops) == 3
    common = dict(codec=video.codec, width=video.width, height=video.height)
    whole = decode_gops(video.init, video.gops, [[0, 1, 2, 3], [], [3, 0]], **common)
    assert [w.shape[0] for w in whole] == [4, 0, 2]
    frames = [decode_frame_leds(f) for f in whole[0]] + [decode_frame_leds(f) for f in whole[2]]
    assert frames == [0, 1, 2, 3, 11, 8]
    empty = decode_gops(video.init, video.gops, [[], [], []], **common)
    assert [e.shape for e in empty] == [(0, 48, 64, 3)] * 3


def test_frames_that_do_not_decode_are_a_dataset_error_naming_them(dataset):
    video = _top(dataset, [0, 1])
    where = rf"{dataset}: camera observation\.images\.top, episodes 0: \w+ frames do not decode"
    half = [g[: len(g) // 2] + bytes(len(g) - len(g) // 2) for g in video.gops]
    for broken in (dataclasses.replace(video, init=b""), dataclasses.replace(video, gops=half)):
        with pytest.raises(DatasetError, match=where):
            broken.decode()
