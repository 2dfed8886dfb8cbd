"""NVDEC through torchcodec: which of its CUDA backends decodes, the torchcodec it needs,
and how its decoder cache is sized (one place for torchcodec's CUDA quirks).

* **The backend.** torchcodec has two CUDA backends: FFmpeg's nvdec hwaccel, the default
  up to 0.12, and its own NVDEC backend ("beta" in 0.11/0.12, the default and "nvdec"
  from 0.13, where "beta" stays an alias). On an H200 with torchcodec 0.11 the FFmpeg one
  returned frames up to 209 levels off the CPU decode (other frames) and took 8.6 s for a
  batch the CPU decoded in 0.018 s; the NVDEC one was within 3 levels and 0.023 s
  (benchmarks/RESULTS.md, "GPU decoding"). Every CUDA decoder jaxload creates is created under
  `set_cuda_backend("beta")`, whatever the installed default (`backend_selected`).
* **The version.** GPU decoding needs `set_cuda_backend`'s NVDEC backend: torchcodec >=
  MIN_TORCHCODEC (`check_torchcodec`, a clear error otherwise).
* **The cache.** The NVDEC backend keeps hardware decoders per GPU for reuse (creating one
  costs 50-70 ms), keyed by codec and *coded* size. jaxload's decode threads each need one
  per (codec, size) group of cameras, so the capacity is raised to hold them all
  (`cache_capacity`). Up to the releases verified here (FIXED_DISPLAY_CROP), a decoder
  reused for a video of the same coded but another display size (e.g. 180 and 184 rows,
  both coded as 192) silently crops it wrong (meta-pytorch/torchcodec#1704): when the
  loader's cameras can collide so, the cache is turned off (`display_collisions`).

    with backend_selected():                    # around VideoDecoder(..., device="cuda:0")
        decoder = VideoDecoder(mp4, device="cuda:0")
    configure_cache(threads_per_device=7, cameras=[("h264", 180, 320), ("h264", 184, 320)])
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import math
import re
import threading
from collections.abc import Iterable, Iterator

from jaxload.errors import GpuDecodeUnavailable

log = logging.getLogger("jaxload.decode.nvdec")

# torchcodec with `set_cuda_backend` and its NVDEC ("beta") backend, as measured right on
# an H200 (torchcodec 0.11.0, CUDA 13 build; benchmarks/RESULTS.md, "GPU decoding").
MIN_TORCHCODEC = (0, 11)
# The first torchcodec release known to crop cached decoders right (meta-pytorch/
# torchcodec#1706); None until a release with it has been checked on a GPU.
FIXED_DISPLAY_CROP: tuple[int, ...] | None = None
# torchcodec's default cache capacity per GPU.
DEFAULT_CACHE_CAPACITY = 20

# Coded sizes are multiples of the codec's block: H.264 macroblocks (16), HEVC's smallest
# coding block as encoders write it (8).
_BLOCK = {"h264": 16, "hevc": 8}

_lock = threading.Lock()
_configured: tuple[int, bool] | None = None  # (capacity, collisions) applied in this process


def torchcodec_version() -> tuple[int, ...]:
    """The installed torchcodec's version as integers ((0, 11, 0) for "0.11.0+cu130")."""
    text = importlib.metadata.version("torchcodec")
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:3])


def check_torchcodec() -> None:
    """GpuDecodeUnavailable unless the installed torchcodec has its NVDEC backend."""
    version = torchcodec_version()
    from jaxload.decode.torchcodec_import import video_decoder_class

    video_decoder_class()  # imports torchcodec.decoders (without torch._dynamo)
    import torchcodec.decoders as decoders

    if version < MIN_TORCHCODEC or not hasattr(decoders, "set_cuda_backend"):
        have = ".".join(map(str, version))
        need = ".".join(map(str, MIN_TORCHCODEC))
        raise GpuDecodeUnavailable(
            f"GPU decoding needs torchcodec >= {need} (its NVDEC backend; FFmpeg's nvdec "
            f"hwaccel returns wrong frames and is ~100x slower); torchcodec {have} is "
            "installed. Install a CUDA build of a newer torchcodec that matches your torch, "
            "or decode_device='cpu'"
        )


@contextlib.contextmanager
def backend_selected() -> Iterator[None]:
    """CUDA decoders created inside use torchcodec's NVDEC backend ("beta": the NVDEC
    backend in 0.11/0.12, an alias of "nvdec" from 0.13 on)."""
    import torchcodec.decoders as decoders

    with decoders.set_cuda_backend("beta"):
        yield


def coded_size(codec: str, height: int, width: int) -> tuple[int, int]:
    """The size a decoder of `codec` allocates for frames of this display size."""
    block = _BLOCK.get(codec.split("-")[0], 16)
    return math.ceil(height / block) * block, math.ceil(width / block) * block


def display_collisions(cameras: Iterable[tuple[str, int, int]]) -> list[list[tuple[int, int]]]:
    """Groups of display sizes (height, width) that share a codec and coded size: their
    decoders would be reused across them by the NVDEC cache (torchcodec#1704)."""
    by_coded: dict[tuple[str, int, int], set[tuple[int, int]]] = {}
    for codec, height, width in cameras:
        by_coded.setdefault((codec, *coded_size(codec, height, width)), set()).add((height, width))
    return [sorted(sizes) for sizes in by_coded.values() if len(sizes) > 1]


def cache_capacity(threads_per_device: int, cameras: Iterable[tuple[str, int, int]]) -> int:
    """Decoders each GPU's cache holds: one per decode thread and (codec, size) group of
    cameras, at least torchcodec's default; 0 (no cache) where the cache would crop wrong."""
    cameras = set(cameras)
    affected = FIXED_DISPLAY_CROP is None or torchcodec_version() < FIXED_DISPLAY_CROP
    if affected and display_collisions(cameras):
        return 0
    return max(DEFAULT_CACHE_CAPACITY, threads_per_device * len(cameras))


def configure_cache(threads_per_device: int, cameras: Iterable[tuple[str, int, int]]) -> int:
    """Sets the NVDEC cache capacity for these cameras (process-wide, as torchcodec's cache
    is); returns it. Said once per process when the cache is turned off."""
    global _configured
    cameras = set(cameras)
    capacity = cache_capacity(threads_per_device, cameras)
    import torchcodec.decoders as decoders

    setter = getattr(decoders, "set_nvdec_cache_capacity", None)  # not in every release
    if setter is None and capacity == 0:
        raise GpuDecodeUnavailable(
            f"cameras {display_collisions(cameras)} share a coded size with another display "
            "size: torchcodec's NVDEC cache crops such videos wrong (meta-pytorch/torchcodec"
            f"#1704), and torchcodec {'.'.join(map(str, torchcodec_version()))} cannot turn "
            "the cache off; install torchcodec with set_nvdec_cache_capacity, resize the "
            "cameras at conversion, or decode_device='cpu'"
        )
    with _lock:
        if _configured is not None and _configured[0] == 0:
            return 0  # once off for a collision, off for this process
        if setter is not None:
            setter(capacity)
        if capacity == 0:
            log.warning(
                "NVDEC decoder cache off: cameras %s share a coded size with another display "
                "size, and torchcodec's cache crops such videos wrong (meta-pytorch/torchcodec"
                "#1704); each decode creates its decoder (~50-70 ms on an H100)",
                display_collisions(cameras),
            )
        _configured = (capacity, capacity == 0)
    return capacity
