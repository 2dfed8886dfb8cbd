"""The hand-off from torchcodec to JAX: decoded frames become jax.Arrays without a copy.

jaxload.device_batch uses it to build each device's shard of a batch from frames that
device decoded itself (torchcodec on "cuda:<i>": NVDEC on a GPU).
"""

from __future__ import annotations

from typing import Any


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
