"""torchcodec's CUDA decoding as jaxload drives it (jaxload.decode.nvdec, backend,
on_device.DeviceDecoder), tested on CPU.

No GPU exists here: where a test needs CUDA, what it would touch is replaced (torchcodec's
VideoDecoder class, torch.cuda's stream) and the test says so. The decoding itself runs
with the real torchcodec on CPU, through the same `DeviceDecoder` the GPUs use.
"""

import threading
import time

import numpy as np
import pytest
import torch

import jaxload
from jaxload.converters.convert import convert
from jaxload.decode import backend, nvdec
from jaxload.decode.backend import TorchcodecBackend
from jaxload.decode.on_device import DeviceDecoder
from jaxload.errors import DecodeTimeoutError, GpuDecodeUnavailable
from tests.support.lerobot_factory import write_lerobot_v3

CAMERAS = {"observation.images.top": (48, 64), "observation.images.wrist": (40, 72)}
WINDOWS = {"observation.images.top": [-0.1, 0.0]}


def two_camera_dataset(root):
    """A converted dataset of 4 episodes, two cameras of other sizes, GOP 4."""
    src = write_lerobot_v3(root / "src", episode_lengths=(12, 30, 9, 21), cameras=CAMERAS)
    convert(src, root / "ds", workers=1, gop=4, progress=False)
    return root / "ds"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return two_camera_dataset(tmp_path_factory.mktemp("nvdec"))


# --- the backend: always torchcodec's NVDEC backend on CUDA ----------------------------


def test_cuda_decoders_are_made_under_torchcodecs_nvdec_backend(monkeypatch):
    """Whatever the installed default, a CUDA decoder is created with torchcodec's NVDEC
    backend selected (never FFmpeg's nvdec hwaccel). Mocked: VideoDecoder (no CUDA here)
    and torch.cuda's stream."""
    from torchcodec.decoders import _decoder_utils, set_cuda_backend

    made = []

    class FakeDecoder:
        def __init__(self, mp4, *, device, **options):
            made.append((device, _decoder_utils._get_cuda_backend()))

        def get_frames_at(self, indices):
            return type(
                "Batch", (), {"data": torch.zeros((len(indices), 2, 2, 3), dtype=torch.uint8)}
            )

    synced = []
    monkeypatch.setattr(backend, "video_decoder_class", lambda: FakeDecoder)
    monkeypatch.setattr(
        torch.cuda, "current_stream", lambda device: type("S", (), {"synchronize": lambda: synced.append(device)})
    )  # fmt: skip
    with set_cuda_backend("ffmpeg"):  # a default that is not NVDEC's
        stream = TorchcodecBackend().open(b"mp4", "cuda:1")
        stream.frames_at([0, 1])
        TorchcodecBackend().open(b"mp4", "cpu")
    # torchcodec >= 0.13 names its NVDEC backend "default" inside; 0.11 and 0.12 "beta".
    nvdec_variant = "default" if nvdec.torchcodec_version() >= (0, 13) else "beta"
    assert made == [("cuda:1", nvdec_variant), ("cpu", "ffmpeg")]
    assert synced == ["cuda:1"]  # frames are complete when handed over


def test_a_torchcodec_without_the_nvdec_backend_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(nvdec, "torchcodec_version", lambda: (0, 10, 0))
    with pytest.raises(GpuDecodeUnavailable, match=r"torchcodec >= 0\.11.*0\.10\.0"):
        nvdec.check_torchcodec()


def test_the_nvdec_cache_holds_every_threads_decoders_unless_it_would_crop_wrong(monkeypatch):
    # 180 and 184 rows are both coded as 192 (H.264 macroblocks): torchcodec#1704.
    assert nvdec.coded_size("h264", 180, 320) == (192, 320)
    assert nvdec.display_collisions([("h264", 180, 320), ("h264", 184, 320)]) == [
        [(180, 320), (184, 320)]
    ]
    assert nvdec.display_collisions([("h264", 176, 320), ("h264", 180, 320)]) == []
    assert nvdec.display_collisions([("h264", 180, 320), ("hevc", 184, 320)]) == []
    assert nvdec.cache_capacity(7, [("h264", 96, 128), ("h264", 480, 640)]) == 20
    assert nvdec.cache_capacity(7, [("h264", 16 * i, 64) for i in range(1, 5)]) == 28
    assert nvdec.cache_capacity(7, [("h264", 180, 320), ("h264", 184, 320)]) == 0
    # A release with the fix keeps its cache (set once one is checked on a GPU).
    monkeypatch.setattr(nvdec, "FIXED_DISPLAY_CROP", (0, 11))
    assert nvdec.cache_capacity(7, [("h264", 180, 320), ("h264", 184, 320)]) == 20


def test_configure_cache_sets_torchcodecs_capacity(monkeypatch):
    import torchcodec.decoders as decoders

    monkeypatch.setattr(nvdec, "_configured", None)
    before = decoders.get_nvdec_cache_capacity()
    try:
        assert nvdec.configure_cache(7, [("h264", 16 * i, 64) for i in range(1, 5)]) == 28
        assert decoders.get_nvdec_cache_capacity() == 28
    finally:
        decoders.set_nvdec_cache_capacity(before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU with NVDEC")
def test_torchcodecs_nvdec_cache_crops_a_reused_decoder_wrong(tmp_path):
    """The bug `nvdec.cache_capacity` works around (torchcodec#1704): two videos of one
    coded size, another display size, decoded one after the other in a process."""
    import av

    from jaxload.decode.torchcodec_import import video_decoder_class

    def video(height):
        path = tmp_path / f"{height}.mp4"
        with av.open(str(path), "w") as out:
            stream = out.add_stream("libx264", 10)
            stream.pix_fmt, stream.width, stream.height = "yuv420p", 320, height
            for i in range(4):
                frame = np.full((height, 320, 3), 40 * i, np.uint8)
                frame[: height // 2] = 200
                out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
            out.mux(stream.encode())
        return path.read_bytes()

    primer, victim = video(184), video(180)
    cpu = video_decoder_class()(victim, device="cpu").get_frames_at([0]).data
    with nvdec.backend_selected():
        video_decoder_class()(primer, device="cuda:0").get_frames_at([0])
        cached = video_decoder_class()(victim, device="cuda:0").get_frames_at([0]).data
    assert (cached.cpu().int() - cpu.int()).abs().max() > 10  # the band the crop destroys


# --- DeviceDecoder: decodes in flight, one decoder per thread, a watchdog -----------------


class RecordingBackend(TorchcodecBackend):
    """The real torchcodec backend, recording which thread opened and used each decoder
    and how many decodes run at once (slowed a little so that they overlap)."""

    def __init__(self, delay=0.05):
        self.delay, self.lock = delay, threading.Lock()
        self.running = self.most = 0
        self.misuse = []

    def open(self, mp4, device):
        stream, owner, outer = super().open(mp4, device), threading.get_ident(), self

        class Recorded:
            def frames_at(self, indices):
                if threading.get_ident() != owner:
                    outer.misuse.append(owner)
                with outer.lock:
                    outer.running += 1
                    outer.most = max(outer.most, outer.running)
                try:
                    time.sleep(outer.delay)
                    return stream.frames_at(indices)
                finally:
                    with outer.lock:
                        outer.running -= 1

        return Recorded()


def _cameras(dataset, positions):
    ds = jaxload.open(dataset, delta_timestamps=WINDOWS)
    samples = ds.__getitems__(positions)
    _, videos = ds.read_encoded(positions)
    return videos, samples


def _sharding():
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((1,), ("data",))
    return lambda ndim: NamedSharding(mesh, P("data"))


def _shapes(dataset):
    spec = jaxload.open(dataset, delta_timestamps=WINDOWS).element_spec()
    return {k: tuple(spec[k].shape) for k in CAMERAS}


def test_a_device_decodes_with_several_decoders_at_once_each_on_its_own_thread(dataset):
    positions = list(range(0, 64, 3))  # 22 rows: enough for 3 decodes of >= 4 rows
    cameras, samples = _cameras(dataset, positions)
    decoder = DeviceDecoder(threads_per_device=3, timeout_s=60)
    rows = np.arange(len(positions))
    with backend.use(RecordingBackend()) as recording:
        out = decoder.decode_to_global(cameras, _shapes(dataset), _sharding(), rows, len(rows))
    decoder.close()
    assert recording.most == 3 and recording.misuse == []
    for key in CAMERAS:
        got = np.asarray(out[key])
        for b, sample in enumerate(samples):
            np.testing.assert_array_equal(got[b], sample[key])


class BlockingBackend(TorchcodecBackend):
    """A decode that never returns (a driver that hangs): what the loader must not wait
    on for ever."""

    def __init__(self):
        self.release = threading.Event()

    def open(self, mp4, device):
        self.release.wait()
        return super().open(mp4, device)


def test_a_stuck_device_decode_raises_naming_the_device_and_cameras(dataset):
    cameras, _ = _cameras(dataset, [0, 1, 2, 3])
    decoder = DeviceDecoder(threads_per_device=1, timeout_s=0.5)
    blocking = BlockingBackend()
    began = time.monotonic()
    try:
        with backend.use(blocking), pytest.raises(DecodeTimeoutError) as caught:
            decoder.decode_to_global(cameras, _shapes(dataset), _sharding(), np.arange(4), 4)
    finally:
        blocking.release.set()
        decoder.close()
    assert time.monotonic() - began < 10
    message = str(caught.value)
    assert "observation.images.top" in message and "did not finish within 0 s" not in message
    assert "stuck" in message and "next() restarts" in message
    assert isinstance(caught.value, jaxload.errors.WorkerTimeoutError)  # the loader restarts


@pytest.mark.integration  # waits out a timeout
def test_a_loader_whose_device_decode_hangs_raises_and_resumes_at_the_same_batch(dataset):
    """What left the loader waiting for ever when a device decode hung (the 96x128 stall
    on an H200 was never diagnosed): now a DecodeTimeoutError after worker_timeout_s,
    and the next next() serves the batch that was due."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(jax.make_mesh((1,), ("data",)), P("data"))
    kw = dict(global_batch_size=4, seed=3, sharding=sharding, delta_timestamps=WINDOWS)
    reference = jaxload.make_loader(dataset, options=jaxload.PipelineOptions(num_workers=0), **kw)
    want = [next(reference) for _ in range(3)]
    reference.close()
    options = jaxload.PipelineOptions(num_workers=0, worker_timeout_s=1, prefetch=1)
    loader = jaxload.make_loader(dataset, decode_device="device", options=options, **kw)
    got = [next(loader)]
    blocking = BlockingBackend()
    try:
        with backend.use(blocking), pytest.raises(DecodeTimeoutError, match="stuck"):
            for _ in range(10):
                got.append(next(loader))
    finally:
        blocking.release.set()
    assert loader.position == 4 * len(got)
    while len(got) < len(want):
        got.append(next(loader))
    loader.close()
    for a, b in zip(got, want, strict=True):
        for key in b:
            np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)


class SlowOnOneSide(TorchcodecBackend):
    """Decodes slowed down on one side: the devices' decode threads ("jaxload-decode") or
    the readers (every other thread). Stands in for a slow NVDEC or a slow CPU."""

    def __init__(self, slow: str, delay: float = 0.2):
        self.slow, self.delay = slow, delay

    def open(self, mp4, device):
        on_devices = threading.current_thread().name.startswith("jaxload-decode")
        if on_devices == (self.slow == "devices"):
            time.sleep(self.delay)
        return super().open(mp4, device)
