"""The decode seam: the one place jaxload turns an mp4 into frames.

Every decode (the map-style dataset, the loader's workers, decoding on devices) asks the
current backend to `open` an mp4 (an init segment and the GOP fragments a batch needs, see
`jaxload.format.mp4`) on a device and then for frames at indices. The default backend is
torchcodec: on "cpu", or on "cuda:<i>" where torchcodec has NVDEC.

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
    """torchcodec's VideoDecoder: one decoder per opened mp4, never shared across threads."""

    def open(self, mp4: bytes, device: str) -> OpenStream:
        decoder = video_decoder_class()(
            mp4,
            seek_mode="exact",  # indexes the in-memory packets up front: cheap
            dimension_order="NHWC",
            device=device,
        )
        return _TorchcodecStream(decoder)


class _TorchcodecStream:
    def __init__(self, decoder: Any):
        self.decoder = decoder

    def frames_at(self, indices: Sequence[int]) -> Any:
        # torchcodec decodes each frame once, in stream order, and writes it into every
        # position that asks for it (no gather afterwards).
        return self.decoder.get_frames_at(indices=list(indices)).data


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
