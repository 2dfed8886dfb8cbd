"""Every kind of LeRobot feature converts, or is refused with a reason: `image` cameras
(PNG frames in the data parquet), camera keys of any name, string features, depth maps,
corrupt image bytes, and a fidelity target (`--min-psnr`) on noisy footage.

Datasets are written by tests/support/lerobot_factory.py (real parquet, real PNGs, real mp4s);
conversion and decoding are the real converter and torchcodec.
"""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jaxload
from jaxload import format as fmt
from jaxload.converters.convert import convert
from jaxload.converters.doctor import check_source
from jaxload.errors import JaxloadError, SourceError
from tests.support.helpers import psnr
from tests.support.lerobot_factory import (
    decode_frame_leds,
    render_frame,
    string_value,
    write_lerobot_v3,
)

pytestmark = pytest.mark.integration

LENGTHS = (9, 3, 14)
IMAGE_CAMERAS = {"image": (48, 64), "wrist_image": (42, 56)}  # openpi's LIBERO keys


def _convert(src, out, **kw):
    return convert(src, out, workers=1, progress=False, **kw).out


@pytest.fixture(scope="module")
def libero_like(tmp_path_factory):
    """Image cameras without an `observation.` prefix, plus a per-frame string feature."""
    root = tmp_path_factory.mktemp("libero_like")
    return write_lerobot_v3(
        root / "src",
        episode_lengths=LENGTHS,
        cameras={},
        image_cameras=IMAGE_CAMERAS,
        string_features=["language_instruction"],
    )


@pytest.fixture(scope="module")
def libero_converted(libero_like):
    return _convert(libero_like, libero_like.parent / "out")


def test_image_cameras_of_any_name_read_like_video_cameras(libero_converted):
    ds = jaxload.open(libero_converted, delta_timestamps={"image": [-0.1, 0.0]})
    assert ds.camera_keys == ["image", "wrist_image"]
    info = fmt.read_info(libero_converted)
    assert {c.source_codec for c in info.cameras.values()} == {"image"}
    for position in range(len(ds)):
        sample = ds[position]
        ep, frame = int(sample["episode_index"]), int(sample["frame_index"])
        assert sample["image"].shape == (2, 48, 64, 3) and sample["image"].dtype == np.uint8
        assert sample["wrist_image"].shape == (42, 56, 3)
        assert sample["image_is_pad"].tolist() == [frame == 0, False]
        assert decode_frame_leds(sample["image"][1]) == frame
        assert decode_frame_leds(sample["wrist_image"]) == frame
        reference = render_frame(48, 64, ep, frame, 0)
        assert psnr(sample["image"][1], reference) >= 38.0


def test_image_cameras_are_lossless_by_default(libero_converted):
    info = fmt.read_info(libero_converted)
    for cam in IMAGE_CAMERAS:
        assert info.cameras[cam].codec == "h264rgb", cam
        assert info.converter["fidelity_psnr_db"][cam] == {"min": None, "mean": None}  # exact


def test_image_cameras_of_an_h264_re_encode_meet_the_default_fidelity_target(libero_like, tmp_path):
    out = _convert(libero_like, tmp_path / "h264", video_codec="h264", episodes=[1])
    info = fmt.read_info(out)
    for cam in IMAGE_CAMERAS:
        assert info.converter["fidelity_psnr_db"][cam]["min"] >= info.converter["image_min_psnr"]
        assert info.cameras[cam].pix_fmt == "yuv444p"  # 4:2:0 caps sharp renders near 33 dB


def test_string_features_are_carried_per_frame(libero_converted):
    ds = jaxload.open(libero_converted, delta_timestamps={"language_instruction": [0.0, 0.1]})
    spec = ds.element_spec()["language_instruction"]
    assert (spec.shape, spec.dtype) == ((2,), np.dtype(str))
    for position in (0, 5, 8, 9, len(ds) - 1):
        sample = ds[position]
        ep, frame = int(sample["episode_index"]), int(sample["frame_index"])
        length = LENGTHS[ep]
        expected = [
            string_value("language_instruction", ep, min(f, length - 1)) for f in (frame, frame + 1)
        ]
        assert sample["language_instruction"].tolist() == expected
    plain = jaxload.open(libero_converted)[4]["language_instruction"]
    assert plain == string_value("language_instruction", 0, 4)


def test_lossless_mode_is_bit_identical(libero_like, tmp_path):
    out = _convert(libero_like, tmp_path / "lossless", video_codec="lossless")
    ds = jaxload.open(out)
    info = fmt.read_info(out)
    assert {c.codec for c in info.cameras.values()} == {"h264rgb"}
    for position in range(len(ds)):
        sample = ds[position]
        ep, frame = int(sample["episode_index"]), int(sample["frame_index"])
        for cam, (key, (h, w)) in enumerate(IMAGE_CAMERAS.items()):
            np.testing.assert_array_equal(sample[key], render_frame(h, w, ep, frame, cam))


def test_an_image_camera_mixed_with_a_video_camera(tmp_path):
    src = write_lerobot_v3(
        tmp_path / "src",
        episode_lengths=(6, 11),
        cameras={"top": (48, 64)},
        image_cameras={"wrist_image": (48, 64)},
    )
    out = _convert(src, tmp_path / "out")
    info = fmt.read_info(out)
    assert (
        info.cameras["top"].codec == "h264" and info.cameras["wrist_image"].source_codec == "image"
    )
    ds = jaxload.open(out)
    samples = ds.__getitems__(range(len(ds)))  # one batch: both cameras decoded together
    for s in samples:
        assert (
            decode_frame_leds(s["top"]) == decode_frame_leds(s["wrist_image"]) == s["frame_index"]
        )


def test_a_mixture_of_an_image_dataset_and_a_video_dataset(libero_converted, tmp_path):
    video = _convert(
        write_lerobot_v3(
            tmp_path / "video_src", episode_lengths=(7, 9), cameras={"image": (48, 64)}
        ),
        tmp_path / "video",
    )
    kw = dict(global_batch_size=8, seed=3, options=jaxload.PipelineOptions(num_workers=0))
    # By default a batch holds no strings (they cannot go into jax.jit); keys= keeps them.
    default = next(jaxload.make_loader([libero_converted, video], **kw))
    assert "language_instruction" not in default and "task" not in default
    keys = ["image", "frame_index", "dataset_index", "language_instruction"]
    batch = next(jaxload.make_loader([libero_converted, video], keys=keys, **kw))
    assert list(batch) == keys
    assert np.array_equal(batch["image"], default["image"])
    images = np.asarray(batch["image"])
    assert images.shape == (8, 48, 64, 3)
    from_libero = np.asarray(batch["dataset_index"]) == 0
    strings = batch["language_instruction"]
    assert strings.dtype.kind == "U"
    # the video dataset lacks the string feature: "" there, the value where it has it
    assert all(s == "" for s in strings[~from_libero])
    assert all(s.startswith("language_instruction: step") for s in strings[from_libero])
    for image, frame in zip(images, np.asarray(batch["frame_index"]), strict=True):
        assert decode_frame_leds(image) == frame


def test_depth_maps_are_refused_naming_the_feature(tmp_path):
    src = write_lerobot_v3(tmp_path / "src", episode_lengths=(4,), cameras={"depth": (48, 64)})
    info_path = src / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"]["depth"]["info"]["is_depth_map"] = True
    info_path.write_text(json.dumps(info, indent=4))
    with pytest.raises(SourceError, match=r"'depth' is a depth map.*12-bit"):
        _convert(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _corrupt_image(src, key: str, row: int) -> None:
    """Replaces one frame's PNG bytes with a truncated copy, in place."""
    path = next((src / "data").rglob("*.parquet"))
    table = pq.read_table(path)
    cells = table[key].to_pylist()
    cells[row] = {"bytes": cells[row]["bytes"][:60], "path": cells[row]["path"]}
    column = pa.array(cells, type=table.schema.field(key).type)
    table = table.set_column(table.schema.get_field_index(key), key, column)
    pq.write_table(table.replace_schema_metadata(table.schema.metadata), path)


def test_a_corrupt_png_is_named_by_file_episode_and_frame(tmp_path):
    src = write_lerobot_v3(
        tmp_path / "src", episode_lengths=(5, 6), cameras={}, image_cameras={"image": (48, 64)}
    )
    _corrupt_image(src, "image", 5 + 2)  # episode 1, frame 2
    with pytest.raises(SourceError) as error:
        _convert(src, tmp_path / "out")
    message = str(error.value)
    assert "file-000.parquet: episode 1, camera 'image', frame 2" in message
    assert "do not decode" in message
    assert not (tmp_path / "out").exists()
    failed = [r for r in check_source(src) if r.status == "FAIL"]
    assert len(failed) == 1 and "episode 1, camera 'image', frame 2" in failed[0].detail


@pytest.mark.processes
def test_min_psnr_chooses_a_crf_per_camera_and_meets_it(tmp_path):
    """Noisy footage: crf 14 misses a 46 dB target; --min-psnr 46 picks lower crfs per
    camera and every stored frame reaches it; the choice is deterministic."""
    src = write_lerobot_v3(
        tmp_path / "src",
        episode_lengths=(12, 20, 9),
        cameras={"top": (96, 128)},
        image_cameras={"wrist": (64, 80)},
        noise=6.0,
    )
    plain = fmt.read_info(_convert(src, tmp_path / "plain", crf=14))
    target = 46.0
    for cam in ("top", "wrist"):
        assert plain.converter["fidelity_psnr_db"][cam]["min"] < target
    first = fmt.read_info(_convert(src, tmp_path / "a", min_psnr=target))
    crfs = first.converter["camera_crf"]
    assert set(crfs) == {"top", "wrist"} and crfs["top"] < 14
    for cam in ("top", "wrist"):
        assert first.converter["fidelity_psnr_db"][cam]["min"] >= target
        assert first.cameras[cam].crf == crfs[cam]
    again = fmt.read_info(
        convert(src, tmp_path / "b", min_psnr=target, workers=2, progress=False).out
    )
    assert again.fingerprint == first.fingerprint


def test_bad_fidelity_arguments_are_refused(libero_like, tmp_path):
    with pytest.raises(JaxloadError, match="give one"):
        _convert(libero_like, tmp_path / "x", crf=20, min_psnr=40.0)
    with pytest.raises(JaxloadError, match="--min-psnr"):
        _convert(libero_like, tmp_path / "y", video_codec="lossless", min_psnr=40.0)


def test_image_cameras_under_hevc_are_stored_as_hevc_444(libero_like, tmp_path):
    """--video-codec hevc: image cameras are HEVC 4:4:4 and meet their 40 dB default."""
    info = fmt.read_info(_convert(libero_like, tmp_path / "hevc", video_codec="hevc"))
    for cam in IMAGE_CAMERAS:
        assert info.cameras[cam].codec == "hevc-yuv444p"
        assert info.converter["fidelity_psnr_db"][cam]["min"] >= info.converter["image_min_psnr"]
    ds = jaxload.open(tmp_path / "hevc")
    assert ds[len(ds) - 1]["image"].shape == (*IMAGE_CAMERAS["image"], 3)


def test_a_broken_stored_stream_is_refused_not_written(monkeypatch):
    """A stored stream that decodes to something else than its source (an encoder or muxer
    bug) is refused by the converter's decode check, naming where. Made real here the way
    it once happened: hevc 4:4:4 records behind an init segment that says 4:2:0 (the muxer
    took its parameter sets from a default encoder, converters/fragments.py)."""
    import av

    from jaxload.converters import video
    from jaxload.converters.episode import _encode

    monkeypatch.setitem(video.STORED_PIX_FMTS, "hevc-yuv444p", "yuv420p")

    def frames():
        for i in range(12):
            yield av.VideoFrame.from_ndarray(render_frame(64, 80, 0, i), format="rgb24")

    options = video.EncodeOptions(codec="hevc", gop=6, crf=14, pix_fmt=video.IMAGE_PIX_FMT)
    with pytest.raises(SourceError, match=r"episode 0.*hevc-yuv444p.*broken, not lossy"):
        _encode(frames, options, 10, "episode 0, camera 'wrist'")
    monkeypatch.undo()  # the same frames, muxed right, are stored
    assert _encode(frames, options, 10, "episode 0").psnr.min() > 40


def test_a_v21_dataset_with_image_cameras_and_strings(tmp_path):
    from tests.support.lerobot_factory_v21 import write_lerobot_v21

    src = write_lerobot_v21(
        tmp_path / "src",
        episode_lengths=(5, 7),
        cameras={"top": (48, 64)},
        image_cameras={"wrist_image": (48, 64)},
        string_features=["note"],
    )
    ds = jaxload.open(_convert(src, tmp_path / "out"))
    for position, sample in enumerate(ds.__getitems__(range(len(ds)))):
        ep, frame = (0, position) if position < 5 else (1, position - 5)
        assert sample["note"] == string_value("note", ep, frame)
        assert decode_frame_leds(sample["wrist_image"]) == decode_frame_leds(sample["top"]) == frame
