"""The decode seam: the one place jaxload turns an mp4 into frames.

Every decode (the map-style dataset, the loader's workers, decoding on devices) asks the
current backend to `open` an mp4 (an init segment and the GOP fragments a batch needs, see
`jaxload.format.mp4`) on a device and then for frames at indices. The default backend is
torchcodec: on "cpu", or on "cuda:<i>" through torchcodec's NVDEC backend, never FFmpeg's
nvdec hwaccel (`jaxload.decode.nvdec`); CUDA frames are complete when returned.

Measurement tools (benchmarks, the profiler, the decode-limit recorder) install their own
backend, usually wrapping the default, for a block of code::

    class Timed(TorchcodecBackend):
        def open(self, mp4, device):
            with timer("decoder_create"):
                return super().open(mp4, device)

    with jaxload.decode.backend.use(Timed()):
        ds[0:32]

The backend is process-wide (read threads use it too); worker processes use the default.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from jaxload.decode import nvdec
from jaxload.decode.torchcodec_import import video_decoder_class


class OpenStream(Protocol):
    """An mp4 opened for decoding (one thread uses it, then drops it)."""

    def frames_at(self, indices: Sequence[int]) -> Any:
        """uint8 frames (N, H, W, 3) at stream frame `indices`, in that order: a torch
        tensor on the device the stream was opened on."""


class DecoderBackend(Protocol):
    def open(self, mp4: bytes, device: str) -> OpenStream:
        """Opens `mp4` (init segment + fragments) for decoding on `device` ("cpu",
        "cuda:0", ...)."""


class TorchcodecBackend:
    """torchcodec's VideoDecoder: one decoder per opened mp4, never shared across threads.
    On a CUDA device always torchcodec's NVDEC backend (`jaxload.decode.nvdec`)."""

    def open(self, mp4: bytes, device: str) -> OpenStream:
        decoder_class = video_decoder_class()
        options = {
            "seek_mode": "exact",  # indexes the in-memory packets up front: cheap
            "dimension_order": "NHWC",
            "device": device,
        }
        if not device.startswith("cuda"):
            return _TorchcodecStream(decoder_class(mp4, **options), None)
        _check_gpu_decode()
        with nvdec.backend_selected():  # only the decoder's creation needs it
            return _TorchcodecStream(decoder_class(mp4, **options), device)


class _TorchcodecStream:
    def __init__(self, decoder: Any, cuda_device: str | None):
        self.decoder, self.cuda_device = decoder, cuda_device

    def frames_at(self, indices: Sequence[int]) -> Any:
        # torchcodec decodes each frame once, in stream order, and writes it into every
        # position that asks for it (no gather afterwards).
        frames = self.decoder.get_frames_at(indices=list(indices)).data
        if self.cuda_device is not None:
            import torch

            # Finished when returned: a consumer on any stream (JAX, through DLPack) reads
            # complete frames; the wait is this decode thread's, not the trainer's.
            torch.cuda.current_stream(self.cuda_device).synchronize()
        return frames


_checked = threading.Event()  # check_torchcodec passed in this process


def _check_gpu_decode() -> None:
    if not _checked.is_set():
        nvdec.check_torchcodec()
        _checked.set()


_DEFAULT = TorchcodecBackend()
_current: DecoderBackend = _DEFAULT
_lock = threading.Lock()


def current() -> DecoderBackend:
    """The backend decodes go through now."""
    return _current


@contextlib.contextmanager
def use(backend: DecoderBackend) -> Iterator[DecoderBackend]:
    """Decodes in this process go through `backend` for the duration of the block."""
    global _current
    with _lock:
        previous, _current = _current, backend
    try:
        yield backend
    finally:
        with _lock:
            _current = previous
