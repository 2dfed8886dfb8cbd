"""Where video is decoded: "cpu" in the Grain workers, or "cuda"/"device" in the training
process onto the device holding each row. The rules for `decode_device="auto"` and the
check that NVDEC can decode a dataset's codecs live here; autotune reuses them.

    device, reasons = choose_decode_device(datasets)   # ("cuda" | "cpu", why)
    check_decode_device("hybrid")                      # ValueError: removed, and why
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from jaxload.batch.schema import rename_key
from jaxload.errors import DatasetError
from jaxload.placement.machine import MachineInfo, probe_machine

log = logging.getLogger("jaxload.placement.device")

# "cpu" in the Grain workers; "cuda" (NVDEC) or "device" (any device type torchcodec
# supports, e.g. CPU devices in tests) in the training process, onto the device that holds
# each row of the global batch. "auto" resolves to "cuda" where NVDEC can decode every
# camera, else "cpu"; the placement (jaxload.placement.decide) then times the CPU readers
# and the devices and keeps the faster (jaxload.placement.choice).
DECODE_DEVICES = ("cpu", "cuda", "device")
# What `check_decode_device` says of "hybrid" (the readers decoding a share of each
# device's rows, the devices the rest), removed: on an H200 host it served 724 samples/s
# at 480x640, 0.28 of the sum of both sides alone (1,597 CPU + 995 NVDEC) and below either
# (benchmarks/RESULTS.md, "GPU decoding"; against a stand-in device 0.53-0.81, "Hybrid
# without a GPU").
HYBRID_REMOVED = (
    "decode_device='hybrid' was removed: splitting each batch's decode between the CPU "
    "readers and the devices measured below either side alone (0.28 of the sum of both "
    "sides on an H200; benchmarks/RESULTS.md, 'GPU decoding'). Use 'auto' (make_loader "
    "times the CPU readers and the devices on the first batches and keeps the faster), "
    "'cpu' or 'cuda'"
)


def check_decode_device(decode_device: str) -> None:
    """Raises ValueError unless `decode_device` is one of DECODE_DEVICES or "auto"."""
    if decode_device == "hybrid":
        raise ValueError(HYBRID_REMOVED)
    if decode_device not in (*DECODE_DEVICES, "auto"):
        raise ValueError(
            f"decode_device={decode_device!r}; choose one of {(*DECODE_DEVICES, 'auto')}"
        )


# Stored codecs no NVDEC decodes (4:4:4 and RGB H.264; HEVC 4:4:4 only on some GPUs):
# image cameras and lossless streams (docs/FORMAT.md, "Camera codecs"). With GPU decoding
# their cameras stay with the workers (CPU) while the other cameras go to the GPUs.
CPU_ONLY_CODECS = frozenset({"h264-yuv444p", "hevc-yuv444p", "h264rgb"})
# NVDEC's smallest frame (width, height) per codec (NVIDIA Video Codec SDK, NVDEC
# application note, decoder capabilities): smaller cameras decode on the CPU.
NVDEC_MIN_SIZE = {"h264": (48, 16), "hevc": (144, 144), "av1": (128, 128), "vp9": (128, 128)}


def below_nvdec_minimum(cam: Any) -> tuple[int, int] | None:
    """NVDEC's minimum (width, height) for a camera's codec when the camera is smaller."""
    width, height = NVDEC_MIN_SIZE.get(cam.codec, (0, 0))
    return (width, height) if cam.width < width or cam.height < height else None


def nvdec_may_decode(cam: Any) -> bool:
    """Whether a camera's stream is one NVDEC could decode at all (codec and size)."""
    return cam.codec not in CPU_ONLY_CODECS and below_nvdec_minimum(cam) is None


def _too_small(datasets: Sequence[Any]) -> list[str]:
    """'<dataset>: <camera> (<codec> WxH, NVDEC's minimum WxH)' of cameras below it."""
    out = []
    for d in datasets:
        for key, cam in sorted(d.video_cameras.items()):
            minimum = cam.codec not in CPU_ONLY_CODECS and below_nvdec_minimum(cam)
            if minimum:
                out.append(
                    f"{d.name}: {key} ({cam.codec} {cam.width}x{cam.height}, NVDEC's minimum "
                    f"{minimum[0]}x{minimum[1]})"
                )
    return out


def gpu_codecs(datasets: Sequence[Any]) -> set[str]:
    """The camera codecs of `datasets` that GPU decoding would handle."""
    return {
        cam.codec for d in datasets for cam in d.video_cameras.values() if nvdec_may_decode(cam)
    }


def decide_decode_device(
    machine: MachineInfo, codecs: set[str], decode_devices: Sequence[str], reasons: list[str]
) -> str:
    """ "cuda" when every GPU's NVDEC decodes every codec, torchcodec can use CUDA here and
    "cuda" is among `decode_devices`, else "cpu"; appends the why to `reasons` (where "cpu"
    is among them too, that make_loader's "auto" times both sides)."""
    if not codecs:
        return "cpu"
    if not machine.gpus:
        reasons.append("decode on CPU: no GPU")
        return "cpu"
    unsupported = nvdec_unsupported(machine, codecs)
    if unsupported:
        reasons.append(
            f"decode on CPU: NVDEC cannot decode {unsupported}; reconvert with "
            "`jaxload convert --video-codec h264`"
        )
        return "cpu"
    if "cuda" not in decode_devices:
        reasons.append(
            f"NVDEC could decode {sorted(codecs)}, but this loader decodes on {list(decode_devices)}"
        )
        return "cpu"
    if not machine.torchcodec_cuda:
        why = "cannot decode on CUDA here" if machine.torchcodec_cuda is False else "not probed"
        reasons.append(f"decode on CPU: torchcodec CUDA decode {why}")
        return "cpu"
    if "cpu" not in decode_devices:
        reasons.append(f"decode on GPU: NVDEC decodes {sorted(codecs)}; workers only read bytes")
    else:
        reasons.append(
            f"NVDEC decodes {sorted(codecs)}: make_loader times the CPU readers and the devices "
            "on the first batches and keeps the faster (jaxload.placement.choice)"
        )
    return "cuda"


def nvdec_unsupported(machine: MachineInfo, codecs: set[str]) -> dict[str, list[str]]:
    """GPU ("name (architecture)") -> codecs among `codecs` its NVDEC cannot decode."""
    return {
        f"{g.name} ({g.architecture})": sorted(codecs - g.nvdec_codecs)
        for g in machine.gpus
        if codecs - g.nvdec_codecs
    }


def choose_decode_device(
    datasets: Sequence[Any], *, machine: MachineInfo | None = None
) -> tuple[str, tuple[str, ...]]:
    """What `make_loader(decode_device="auto")` starts from: ("cuda" | "cpu", reasons).

    CUDA when torchcodec decodes on a GPU here and every GPU's NVDEC handles every camera
    codec of the datasets (A100/H100/H200 have no AV1 decoder); otherwise CPU. Where it is
    "cuda", the placement then times both sides (`jaxload.placement.choice`).
    """
    codecs = gpu_codecs(datasets)
    machine = machine or probe_machine()
    if machine.gpus and machine.torchcodec_cuda is None and codecs:
        d, cam = next(
            (d, k)
            for d in datasets
            for k, c in sorted(d.video_cameras.items())
            if nvdec_may_decode(c)
        )
        machine = dataclasses.replace(
            machine, torchcodec_cuda=probe_torchcodec_cuda(d.storage, cam)
        )
    reasons: list[str] = []
    device = decide_decode_device(machine, codecs, ("cpu", "cuda"), reasons)
    small = _too_small(datasets)
    if small and machine.gpus:
        reasons.append(f"decode on CPU: {'; '.join(small)} (smaller than NVDEC decodes)")
    if not reasons:  # no camera NVDEC would decode, so none of the reasons above applied
        if not any(d.video_cameras for d in datasets):
            reasons.append("decode on CPU: no video camera")
        elif not machine.gpus:
            reasons.append("decode on CPU: no GPU")
        else:
            reasons.append("decode on CPU: every camera is of a codec only the CPU decodes")
    return device, tuple(reasons)


def check_cuda_decodable(datasets: Sequence[Any], *, machine: MachineInfo | None = None) -> None:
    """Raises DatasetError when a GPU's NVDEC cannot decode a camera of the datasets: its
    codec (AV1 on A100/H100/H200), or its size (below NVDEC_MIN_SIZE: HEVC under 144x144)."""
    machine = machine or probe_machine()
    by_codec: dict[str, list[str]] = {}
    for d in datasets:
        for key, cam in d.video_cameras.items():
            if cam.codec not in CPU_ONLY_CODECS:  # these decode in the workers
                by_codec.setdefault(cam.codec, []).append(f"{d.name}: {key}")
    unsupported = nvdec_unsupported(machine, set(by_codec))
    if unsupported:
        bad = sorted({c for codecs in unsupported.values() for c in codecs})
        raise DatasetError(
            f"decode_device='cuda': NVDEC on {', '.join(unsupported)} cannot decode {bad} "
            f"({'; '.join(k for c in bad for k in by_codec[c])}); reconvert with "
            "`jaxload convert SRC OUT --video-codec h264`, or use decode_device='cpu'"
        )
    small = _too_small(datasets)
    if small:
        raise DatasetError(
            f"decode_device='cuda': NVDEC cannot decode frames this small: {'; '.join(small)}; "
            "reconvert with `jaxload convert SRC OUT --video-codec h264` (H.264 decodes on "
            "NVDEC from 48x16), or use decode_device='cpu'"
        )


def probe_decode(path: Any, camera: str, device: str) -> None:
    """Decodes one stored GOP of `camera` (dataset at `path`, or its DatasetStorage) on `device` through the
    reader's own path (DatasetFiles -> EncodedFrames -> the decode backend); raises what
    that raises. CI runs it on "cpu", so an error in the path itself cannot hide."""
    import numpy as np

    from jaxload.decode.frames import EncodedFrames
    from jaxload.format.reader import DatasetFiles

    files = DatasetFiles(path)
    cam = files.info.cameras[camera]
    row = len(files.episodes) // 2
    init, gop = files.read_gop(row, camera, 0)
    frames = EncodedFrames(
        codec=cam.codec,
        width=cam.width,
        height=cam.height,
        init=init,
        gops=[gop],
        gop_index=np.zeros((1, 1), np.int64),
        frame_index=np.zeros((1, 1), np.int64),
    ).decode(device, as_torch=True)
    if tuple(frames.shape) != (1, 1, cam.height, cam.width, 3):
        raise RuntimeError(f"probe decode gave frames of shape {tuple(frames.shape)}")


# Messages of errors that mean "this machine cannot decode on CUDA" (no driver, a CPU-only
# torchcodec or FFmpeg without NVDEC): those answer "no"; anything else is a bug and raises.
_NO_CUDA_DECODE = ("cuda", "nvdec", "cuvid", "nvcuvid", "driver", "device")


def probe_torchcodec_cuda(path: Any, camera: str) -> bool:
    """Whether torchcodec decodes a stored GOP of `camera` on CUDA here (creates a CUDA
    context). Logged with the reason when it cannot."""
    try:
        import torch
    except ImportError:
        log.info("torchcodec CUDA decode: torch is not installed")
        return False
    if not torch.cuda.is_available():
        log.info("torchcodec CUDA decode: torch sees no CUDA device")
        return False
    try:
        probe_decode(path, camera, "cuda:0")
    except (RuntimeError, ValueError, OSError, DatasetError) as e:
        if not any(word in str(e).lower() for word in _NO_CUDA_DECODE):
            raise
        log.info("torchcodec CUDA decode unavailable: %s: %s", type(e).__name__, e)
        return False
    return True


def resolve_decode_device(
    decode_device: str, datasets: Sequence[Any], sharding: Any, reasons: list[str] | None = None
) -> str:
    """ "auto" -> "cuda" or "cpu" (logged with the reason, also appended to `reasons`);
    "cuda" -> checked against NVDEC."""
    check_decode_device(decode_device)
    videos = [d for d in datasets if d.video_cameras]
    if videos and decode_device == "cuda":
        check_cuda_decodable(videos)
    if decode_device != "auto":
        return decode_device
    if not videos:
        if reasons is not None:
            reasons.append("no video cameras")
        return "cpu"
    device, why = choose_decode_device(videos)
    if device != "cpu" and sharding is None:
        device, why = "cpu", (*why, "no `sharding`: rows have no device to decode on")
    log.info("decode_device='auto' -> %r: %s", device, "; ".join(why))
    if reasons is not None:
        reasons.extend(why)
    return device


def cameras_decoded_on_device(
    decode_device: str,
    datasets: Sequence[Any],
    key_maps: Sequence[Mapping[str, str | None]],
    sharding: Any,
) -> tuple[str, ...]:
    """Camera keys (batch names) the training process decodes; () when workers decode."""
    if decode_device == "cpu":
        return ()
    if sharding is None:
        raise ValueError(
            f"decode_device={decode_device!r} decodes each row on the device that holds it: "
            "pass `sharding` (a NamedSharding over the batch axis)"
        )
    on_gpus = all(d.platform == "gpu" for d in sharding.addressable_devices)
    if decode_device == "cuda" and not on_gpus:
        raise ValueError("decode_device='cuda' needs GPU devices in `sharding`; use 'cpu'")
    per_dataset = [
        {rename_key(c, m) for c in d.camera_keys} - {None}
        for d, m in zip(datasets, key_maps, strict=True)
    ]
    if on_gpus:  # cameras NVDEC cannot decode stay with the workers
        cpu_only = {
            rename_key(k, m)
            for d, m in zip(datasets, key_maps, strict=True)
            for k, c in d.video_cameras.items()
            if not nvdec_may_decode(c)
        }
        per_dataset = [cams - cpu_only for cams in per_dataset]
    cameras = set().union(*per_dataset)
    for d, (ds, cams) in enumerate(zip(datasets, per_dataset, strict=True)):
        compressed = {rename_key(c, key_maps[d]) for c in ds.video_cameras}
        if cams - compressed:
            raise ValueError(
                f"dataset {d} ({ds.name}) cannot hand over {sorted(cams - compressed)} "
                "compressed (its frames come decoded); use decode_device='cpu'"
            )
        if cams != cameras:
            raise ValueError(
                f"decode_device={decode_device!r} needs every camera in every dataset; dataset "
                f"{d} lacks {sorted(cameras - cams)} (use decode_device='cpu' for such mixtures)"
            )
    return tuple(sorted(cameras))


def device_streams(
    datasets: Sequence[Any], key_maps: Sequence[Mapping[str, str]], encoded: Sequence[str]
) -> tuple[tuple[str, int, int], ...]:
    """(codec, height, width) of every stream of the cameras the devices decode."""
    return tuple(
        sorted(
            {
                (c.codec, c.height, c.width)
                for d, m in zip(datasets, key_maps, strict=True)
                for k, c in d.video_cameras.items()
                if rename_key(k, m) in encoded
            }
        )
    )


def default_decode_threads(sharding: Any) -> int:
    """Decodes in flight per device: a GPU's NVDEC engines (`GpuInfo.nvdec_engines`), 2
    on other devices."""
    if not all(d.platform == "gpu" for d in sharding.addressable_devices):
        return 2
    gpus = probe_machine().gpus
    return min((g.nvdec_engines for g in gpus), default=2)
