"""Video decoded in the training process, onto the device that holds each batch row.

With ``make_loader(..., decode_device="cuda")`` the Grain workers only read: each camera
of a batch travels as one ``EncodedFrames`` (compressed GOPs plus frame offsets, rows in
batch order). Here, in the training process's prefetch thread, every addressable device
decodes exactly the rows its shard of the global array holds (torchcodec on that device,
NVDEC on a GPU) and hands them to JAX through DLPack without a host copy.

    arrays = decode_to_global(video, (96, 128, 3), sharding, rows, global_batch_size=64)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxload.video import EncodedFrames


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
    video: EncodedFrames,
    sample_shape: tuple[int, ...],
    sharding: Any,
    rows: np.ndarray,
    global_batch_size: int,
) -> Any:
    """A global jax.Array (G, *sample_shape): each device decodes the rows it holds.

    `rows` are the global rows this process read (sorted), in the order `video` holds them.
    """
    import jax

    from jaxload.device_decode import to_jax, torch_device_for

    global_shape = (global_batch_size, *sample_shape)
    arrays = []
    for device, index in sharding.addressable_devices_indices_map(global_shape).items():
        wanted = np.arange(global_batch_size)[index[0]]
        local = np.searchsorted(rows, wanted)
        frames = video.select(local).decode(torch_device_for(device), as_torch=True)
        frames = frames.reshape(len(local), *sample_shape)
        arrays.append(jax.device_put(to_jax(frames), device))
    return jax.make_array_from_single_device_arrays(global_shape, sharding, arrays)
