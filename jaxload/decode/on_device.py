"""Video decoded in the training process, onto the device that holds each batch row.

With ``make_loader(..., decode_device="cuda")`` the Grain workers only read: each camera
of a batch travels as one ``EncodedFrames`` (compressed GOPs plus frame offsets, rows in
batch order). Here, in the training process's prefetch thread, every addressable device
decodes exactly the rows its shard of the global arrays holds (torchcodec on that device,
NVDEC on a GPU; cameras of one codec and size share a decoder) and hands them to JAX
through DLPack without a host copy.

    arrays = decode_to_global({"top": video}, {"top": (96, 128, 3)}, sharding_for, rows, 64)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.decode.frames import EncodedFrames, decode_grouped


def merge_encoded(parts: Sequence[tuple[np.ndarray, EncodedFrames]], n: int) -> EncodedFrames:
    """One camera's frames for n batch rows from per-dataset parts (rows, frames of those rows)."""
    if len(parts) == 1 and np.array_equal(parts[0][0], np.arange(n)):
        return parts[0][1]
    videos = [video for _, video in parts]
    merged = EncodedFrames.concat(videos)  # one init serves the camera: GOPs carry their SPS
    slots = videos[0].gop_index.shape[1:]  # the same window in every part
    merged = dataclasses.replace(
        merged,
        gop_index=merged.gop_index.reshape(-1, *slots),
        frame_index=merged.frame_index.reshape(-1, *slots),
    )
    order = np.empty(n, np.int64)  # batch row -> row of the concatenation
    order[np.concatenate([rows for rows, _ in parts])] = np.arange(n)
    return merged.select(order)


def decode_to_global(
    videos: Mapping[str, EncodedFrames],
    sample_shapes: Mapping[str, tuple[int, ...]],
    sharding_for: Callable[[int], Any],
    rows: np.ndarray,
    global_batch_size: int,
) -> dict[str, Any]:
    """Global jax.Arrays (G, *sample_shape) per camera: each device decodes the rows it holds.

    `rows` are the global rows this process read (sorted), in the order `videos` hold them;
    `sharding_for(ndim)` is the batch sharding for arrays of that rank.
    """
    import jax

    keys = list(videos)
    shapes = {k: (global_batch_size, *sample_shapes[k]) for k in keys}
    shardings = {k: sharding_for(len(shapes[k])) for k in keys}
    per_device: dict[str, list[Any]] = {k: [] for k in keys}
    first = shardings[keys[0]].addressable_devices_indices_map(shapes[keys[0]])
    for device, index in first.items():
        wanted = np.arange(global_batch_size)[index[0]]
        local = np.searchsorted(rows, wanted)
        parts = [videos[k].select(local) for k in keys]
        decoded = decode_grouped(parts, torch_device_for(device), as_torch=True)
        for key, frames in zip(keys, decoded, strict=True):
            frames = frames.reshape(len(local), *sample_shapes[key])
            per_device[key].append(jax.device_put(to_jax(frames), device))
    return {
        k: jax.make_array_from_single_device_arrays(shapes[k], shardings[k], per_device[k])
        for k in keys
    }


def to_jax(frames: Any) -> Any:
    """A torch tensor (CPU or CUDA) as a jax.Array on the same device, sharing its memory.

    The tensor must be contiguous (EncodedFrames.decode returns contiguous frames); a
    strided view would make JAX copy or refuse.
    """
    import jax

    if not frames.is_contiguous():
        raise ValueError("to_jax needs a contiguous tensor (DLPack with compact strides)")
    return jax.dlpack.from_dlpack(frames)


def torch_device_for(jax_device: Any) -> str:
    """The torch device string of a JAX device ("cpu", or "cuda:<local id>")."""
    if jax_device.platform == "cpu":
        return "cpu"
    if jax_device.platform == "gpu":
        return f"cuda:{jax_device.local_hardware_id}"
    raise ValueError(f"cannot decode video on a {jax_device.platform} device")
