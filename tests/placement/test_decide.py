"""Where video is decoded, decided in one place (jaxload.placement.decide): a fixed
device, or "auto" measured on the read spec (jaxload.placement.choice) where NVDEC could
decode, and said why.

No GPU here: CPU devices stand in for the GPUs (the "device" path decodes through the same
`DeviceDecoder`), and a backend that slows one side stands in for a slow NVDEC or CPU.
"""

import dataclasses
import importlib

import jax
import pytest
import torch
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxload
from jaxload.decode import backend
from jaxload.placement import choice as decode_choice
from jaxload.placement import decide as decide_module
from tests.decode.test_nvdec import WINDOWS, SlowOnOneSide, two_camera_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return two_camera_dataset(tmp_path_factory.mktemp("decide"))


@pytest.mark.integration  # two seconds of timed decoding
def test_make_loader_auto_measures_where_the_devices_can_decode(dataset, monkeypatch):
    """make_loader(decode_device="auto") where NVDEC could decode: it times both sides and
    keeps the faster, in the spec and the repr. Mocked: the GPU probe that resolves "auto"
    to the devices (no GPU here); CPU devices decode in place of NVDEC."""
    monkeypatch.setattr(
        decide_module,
        "resolve_decode_device",
        lambda asked, datasets, sharding, reasons=None: "device" if asked == "auto" else asked,
    )
    sharding = NamedSharding(jax.make_mesh((1,), ("data",)), P("data"))
    kw = dict(global_batch_size=8, seed=3, sharding=sharding, delta_timestamps=WINDOWS)
    options = jaxload.PipelineOptions(num_workers=0, decode_threads=1)
    with backend.use(SlowOnOneSide("devices", delay=0.5)):
        loader = jaxload.make_loader(dataset, decode_device="auto", options=options, **kw)
    with loader:
        assert loader.spec.placement.choice.device == "cpu"
        assert loader.spec.placement.decode_device == "cpu" and loader.spec.placement.encoded == ()
        assert loader.options.decode_device == "auto"  # what was asked; the placement decides
        assert "decode=cpu (auto: measured" in repr(loader)
        reference = jaxload.make_loader(dataset, options=options, **kw)
        with reference:
            for _ in range(3):
                got, want = next(loader), next(reference)
                for key in want:
                    assert (jax.numpy.asarray(got[key]) == jax.numpy.asarray(want[key])).all()


@pytest.mark.integration  # two seconds of timed decoding
def test_autotune_on_a_gpu_host_leaves_the_decode_device_to_autos_measurement(dataset, monkeypatch):
    """PipelineOptions(autotune=True) where NVDEC could decode: the loader measures the
    sides (as decode_device="auto") instead of decoding on the devices unmeasured. Mocked:
    the GPU host (no GPU here); CPU devices decode in place of NVDEC."""
    recommend_module = importlib.import_module("jaxload.autotune.recommend")  # not the function
    from jaxload.placement import machine as M

    h100 = M.GpuInfo("NVIDIA H100 80GB HBM3", 80 * M.GiB, (9, 0))
    host = dataclasses.replace(M.probe_machine(), gpus=(h100,), torchcodec_cuda=True)
    monkeypatch.setattr(recommend_module, "probe_machine", lambda: host)
    monkeypatch.setattr(
        decide_module,
        "resolve_decode_device",
        lambda asked, datasets, sharding, reasons=None: "device" if asked == "auto" else asked,
    )
    sharding = NamedSharding(jax.make_mesh((1,), ("data",)), P("data"))
    options = jaxload.PipelineOptions(autotune=True, num_workers=0, decode_threads=1)
    with backend.use(SlowOnOneSide("devices", delay=0.5)):
        loader = jaxload.make_loader(
            dataset, global_batch_size=8, sharding=sharding, delta_timestamps=WINDOWS,
            options=options,
        )  # fmt: skip
    with loader:
        assert loader.spec.placement.choice is not None, "autotune ran unmeasured"
        assert loader.spec.placement.choice.device == "cpu"
        assert "decode=cpu (auto: measured" in repr(loader)


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU does")
def test_auto_without_a_gpu_says_why_it_decodes_on_the_cpu(dataset):
    """No GPU: "auto" is "cpu", and the loader says so where a user looks (not only a log
    line, which a root logger set up by absl hides)."""
    sharding = NamedSharding(jax.make_mesh((1,), ("data",)), P("data"))
    options = jaxload.PipelineOptions(num_workers=0, decode_device="auto")
    with jaxload.make_loader(
        dataset, global_batch_size=8, sharding=sharding, options=options
    ) as loader:
        assert loader.spec.placement.choice.device == "cpu"
        assert "decode=cpu (auto: decode on CPU: no GPU)" in repr(loader)


# --- decide_placement on the read spec, without a loader ---------------------------------


def _read(dataset, **kwargs):
    from jaxload.resolution.request import LoaderRequest
    from jaxload.resolution.resolve import resolve_read

    kwargs.setdefault("host_index", None if "sharding" in kwargs else 0)
    kwargs.setdefault("host_count", None if "sharding" in kwargs else 1)
    return resolve_read(LoaderRequest(dataset, global_batch_size=8, **kwargs))


def _options(**kwargs):
    return jaxload.PipelineOptions(num_workers=0, **kwargs).resolve()


def _sharding():
    return NamedSharding(jax.make_mesh((1,), ("data",)), P("data"))


def test_cpu_decodes_everything_in_the_readers(dataset):
    placement, specs = decide_module.decide_placement(_read(dataset), _options())
    assert placement == decide_module.Placement(decode_device="cpu", source_transforms=(None,))
    assert placement.decode_threads is None and placement.choice is None
    (spec,) = specs
    assert spec["observation.images.top"][0] == (48, 64, 3)  # decoded frames in the batch


def test_devices_decode_the_cameras_sent_encoded_with_their_streams(dataset):
    read = _read(dataset, sharding=_sharding())
    placement, _ = decide_module.decide_placement(read, _options(decode_device="device"))
    cameras = tuple(sorted(read.datasets[0].camera_keys))
    assert placement.decode_device == "device" and tuple(sorted(placement.encoded)) == cameras
    assert placement.streams == (("h264", 40, 72), ("h264", 48, 64))  # sorted
    assert placement.decode_threads == 2  # CPU devices: 2 decodes in flight each
    assert placement.choice is None  # fixed: nothing measured
    asked, _ = decide_module.decide_placement(
        read, _options(decode_device="device", decode_threads=3)
    )
    assert asked.decode_threads == 3
    # The image transforms follow the decode: on the devices, over the global batch.
    from jaxload.transforms import Resize

    moved, _ = decide_module.decide_placement(
        read, _options(decode_device="device"), [Resize((8, 8))]
    )
    assert moved.image_transforms_on == "device" and moved.transforms_in_readers is None
    assert moved.transforms_on_devices is moved.image_transforms is not None
    kept, _ = decide_module.decide_placement(read, _options(), [Resize((8, 8))])
    assert (
        kept.transforms_in_readers is kept.image_transforms and kept.transforms_on_devices is None
    )


def test_auto_measured_on_the_cpus_side_sends_nothing_encoded(dataset, monkeypatch):
    """Mocked: the GPU probe that resolves "auto" to the devices (no GPU here), and the
    measurement's outcome (measured for real in the integration tests above)."""
    monkeypatch.setattr(
        decide_module,
        "resolve_decode_device",
        lambda asked, datasets, sharding, reasons=None: "device" if asked == "auto" else asked,
    )
    measured = []

    def measure(read, encoded, options, threads):
        measured.append((tuple(sorted(encoded)), threads))
        return decode_choice.DecodeChoice("cpu", ("the readers were faster",), 900.0, 100.0)

    monkeypatch.setattr(decide_module, "measure_decode_paths", measure)
    read = _read(dataset, sharding=_sharding())
    placement, _ = decide_module.decide_placement(read, _options(decode_device="auto"))
    assert measured == [(tuple(sorted(read.datasets[0].camera_keys)), 2)]
    assert placement.decode_device == "cpu" and placement.encoded == ()
    assert placement.streams == () and placement.decode_threads is None
    assert placement.choice.cpu_frames_per_s == 900.0
