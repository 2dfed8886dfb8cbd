"""Decode in the training process, onto the devices that hold each row, without a host copy.

Grain workers stay CPU-only: they read and hand over `EncodedFrames` (compressed GOPs plus
frame offsets). Here each local device decodes the rows it holds (torchcodec on that
device: NVDEC on a GPU) and the frames reach JAX through DLPack, zero-copy, as the
device's shard of the global batch array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxload.video import EncodedFrames


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


def decode_sharded(
    video: EncodedFrames,
    global_shape: Sequence[int],
    sharding: Any,
    row_offset: int,
) -> Any:
    """This host's rows of one camera as a global jax.Array over `sharding`.

    `row_offset` is the global batch row of this host's first row; every addressable
    device decodes exactly the rows its shard covers, on itself.
    """
    import jax

    arrays = []
    for device, index in sharding.addressable_devices_indices_map(tuple(global_shape)).items():
        rows = index[0]
        start = (rows.start or 0) - row_offset
        stop = (rows.stop if rows.stop is not None else global_shape[0]) - row_offset
        frames = video.select(slice(start, stop)).decode(torch_device_for(device), as_torch=True)
        frames = frames.reshape(stop - start, *global_shape[1:])
        arrays.append(jax.device_put(to_jax(frames), device))
    return jax.make_array_from_single_device_arrays(tuple(global_shape), sharding, arrays)


def host_rows(sharding: Any, global_rows: int) -> np.ndarray:
    """Global batch rows held by this process's devices (sorted)."""
    covered = set()
    for index in sharding.addressable_devices_indices_map((global_rows,)).values():
        covered.update(range(global_rows)[index[0]])
    return np.asarray(sorted(covered), dtype=np.int64)
