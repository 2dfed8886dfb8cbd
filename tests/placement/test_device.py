"""decode_device="auto" and the NVDEC check, with simulated GPU inventories (no GPU exists
here: the machine description is what is simulated; datasets and the loader are real)."""

import dataclasses
import logging

import pytest
import torch

import jaxload
from jaxload.converters.convert import convert
from jaxload.errors import DatasetError
from jaxload.placement.device import check_cuda_decodable, choose_decode_device
from jaxload.placement.machine import GpuInfo, MachineInfo
from tests.support.lerobot_factory import write_lerobot_v3

GiB = 2**30
H100 = GpuInfo("NVIDIA H100 80GB HBM3", 80 * GiB, (9, 0))
L4 = GpuInfo("NVIDIA L4", 24 * GiB, (8, 9))


def _machine(*gpus, cuda=True):
    return MachineInfo(
        cpu_count=16,
        memory_total=128 * GiB,
        memory_available=100 * GiB,
        gpus=tuple(gpus),
        torchcodec_cuda=cuda if gpus else None,
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("choice")
    src = write_lerobot_v3(root / "src", episode_lengths=(6, 4))
    convert(src, root / "ds", workers=1, progress=False)
    return jaxload.open(root / "ds")


@pytest.fixture(scope="module")
def av1_dataset(tmp_path_factory):
    """A real AV1 source (lerobot's default codec), converted with the defaults: its
    stream is copied, so the dataset's camera is AV1 (at 128x160, NVDEC's AV1 minimum
    being 128x128)."""
    root = tmp_path_factory.mktemp("choice_av1")
    src = write_lerobot_v3(
        root / "src",
        episode_lengths=(6, 4),
        video_codec="av1",
        cameras={"observation.images.top": (128, 160)},
    )
    convert(src, root / "ds", workers=1, progress=False)
    ds = jaxload.open(root / "ds")
    assert ds.info.cameras["observation.images.top"].codec == "av1"
    return ds


def _described_as(dataset, codec):
    """The dataset's description with its cameras' codec replaced (only info is read)."""
    cams = {k: dataclasses.replace(c, codec=codec) for k, c in dataset.info.cameras.items()}

    class Described:  # the EpisodeDataset attributes the decode choice reads
        name = dataset.path
        storage = dataset.storage
        video_cameras = cams

    return Described()


def test_h264_decodes_on_an_h100(dataset):
    device, reasons = choose_decode_device([dataset], machine=_machine(H100))
    assert device == "cuda", reasons  # auto then times the CPU readers against NVDEC
    assert "make_loader times the CPU readers and the devices" in " ".join(reasons)


def test_av1_falls_back_to_cpu_on_an_h100_and_says_how_to_fix_it(av1_dataset):
    device, reasons = choose_decode_device([av1_dataset], machine=_machine(H100))
    assert device == "cpu"
    assert "av1" in " ".join(reasons) and "--video-codec h264" in " ".join(reasons)
    assert choose_decode_device([av1_dataset], machine=_machine(L4))[0] == "cuda"


def test_no_gpu_or_no_torchcodec_cuda_means_cpu(dataset):
    assert choose_decode_device([dataset], machine=_machine()) == (
        "cpu",
        ("decode on CPU: no GPU",),
    )
    device, reasons = choose_decode_device([dataset], machine=_machine(H100, cuda=False))
    assert device == "cpu" and "torchcodec CUDA decode cannot" in reasons[0]


def test_explicit_cuda_with_av1_on_an_h100_is_a_clear_error(av1_dataset):
    with pytest.raises(DatasetError, match=r"NVDEC on NVIDIA H100.*\['av1'\].*--video-codec h264"):
        check_cuda_decodable([av1_dataset], machine=_machine(H100))
    check_cuda_decodable([av1_dataset], machine=_machine(L4))


def test_hevc_below_nvdecs_minimum_decodes_on_cpu_or_is_refused_under_cuda(dataset):
    """NVDEC decodes HEVC from 144x144: a 48x64 HEVC camera goes to the CPU under "auto"
    (with the reason), and "cuda" is refused naming the camera, codec, size and the fix."""
    small_hevc = _described_as(dataset, "hevc")
    device, reasons = choose_decode_device([small_hevc], machine=_machine(L4))
    assert device == "cpu", reasons
    assert "observation.images.top (hevc 64x48, NVDEC's minimum 144x144)" in " ".join(reasons)
    match = r"cannot decode frames this small: .*observation\.images\.top \(hevc 64x48.*--video-codec h264"
    with pytest.raises(DatasetError, match=match):
        check_cuda_decodable([small_hevc], machine=_machine(L4))
    check_cuda_decodable([dataset], machine=_machine(L4))  # H.264 at 48x64 is fine
    # Without a GPU, a camera too small for NVDEC anyway: the reason is still given.
    assert choose_decode_device([small_hevc], machine=_machine()) == (
        "cpu",
        ("decode on CPU: no GPU",),
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU does")
def test_make_loader_auto_decodes_on_cpu_here_and_logs_why(dataset, caplog):
    with caplog.at_level(logging.INFO, logger="jaxload"):
        loader = jaxload.make_loader(
            dataset,
            global_batch_size=4,
            decode_device="auto",
            options=jaxload.PipelineOptions(num_workers=0),
            host_index=0,
            host_count=1,
        )
    with loader:
        batch = next(loader)
    assert batch["observation.images.top"].shape == (4, 48, 64, 3)
    assert "decode_device='auto' -> 'cpu'" in caplog.text and "no GPU" in caplog.text


@pytest.fixture
def image_camera_dataset(dataset):
    """The dataset with a second camera stored as an image camera is (4:4:4 H.264)."""
    top = dataset.info.cameras["observation.images.top"]
    cams = {**dataset.info.cameras, "wrist_image": dataclasses.replace(top, codec="h264-yuv444p")}

    class Described:  # the EpisodeDataset attributes the decode placement reads
        name = dataset.path
        camera_keys = sorted(cams)
        video_cameras = cams

    return Described()


def test_cameras_nvdec_cannot_decode_stay_with_the_workers(image_camera_dataset):
    """4:4:4 and lossless cameras are not sent to NVDEC; the other cameras are. The GPU
    devices are simulated (no GPU here): only their `platform` is read."""
    from jaxload.placement.device import cameras_decoded_on_device

    class GpuDevice:
        platform = "gpu"

    class GpuSharding:
        addressable_devices = (GpuDevice(), GpuDevice())

    check_cuda_decodable([image_camera_dataset], machine=_machine(H100))  # no error
    assert choose_decode_device([image_camera_dataset], machine=_machine(H100))[0] == "cuda"
    on_gpu = cameras_decoded_on_device("cuda", [image_camera_dataset], [{}], GpuSharding())
    assert on_gpu == ("observation.images.top",)
    image_camera_dataset.video_cameras = {
        "wrist_image": image_camera_dataset.video_cameras["wrist_image"]
    }
    device, reasons = choose_decode_device([image_camera_dataset], machine=_machine(H100))
    assert (device, reasons) == (
        "cpu",
        ("decode on CPU: every camera is of a codec only the CPU decodes",),
    )
