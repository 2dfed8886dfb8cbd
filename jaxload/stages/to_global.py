"""`ToGlobalArrays`: this host's rows of a batch -> global jax.Arrays over the spec's
sharding, in the training process; cameras left compressed are decoded on the devices
here, and image transforms placed on the devices run here."""

from __future__ import annotations

from typing import Any

import grain
import numpy as np

from jaxload.batch import hosts
from jaxload.batch.keys import is_host_only
from jaxload.decode import nvdec
from jaxload.decode.frames import EncodedFrames
from jaxload.decode.on_device import DeviceDecoder
from jaxload.resolution.spec import LoaderSpec
from jaxload.stages.read_batch import Batch
from jaxload.transforms.on_device import POSITIONS_KEY, TransformOnDevices


class ToGlobalArrays(grain.transforms.Map):
    """Host-local batch -> global jax.Arrays over the spec's sharding (strings stay numpy).

    Cameras the readers left compressed (decode_device "cuda" or "device") are decoded
    here, each device decoding the rows it holds, several decodes in flight per device
    (`jaxload.decode.on_device.DeviceDecoder`). Image transforms placed on the devices run
    here, after decode (jaxload.transforms.on_device).
    """

    def __init__(self, spec: LoaderSpec):
        self.sharding, self.global_batch_size = spec.sharding, spec.global_batch_size
        self.rows = spec.rows
        self.sample_shapes = {k: spec.schema.fields[k].shape for k in spec.placement.encoded}
        self._by_rank: dict[int, Any] = {}
        self.decoder = None
        if spec.placement.encoded:
            threads = spec.placement.decode_threads
            self.decoder = DeviceDecoder(threads, spec.options.worker_timeout_s)
            if spec.placement.streams and _on_gpus(spec.sharding):
                nvdec.configure_cache(threads, spec.placement.streams)
        self.on_devices = None
        on_devices = spec.placement.transforms_on_devices
        if on_devices is not None:
            self.on_devices = TransformOnDevices(
                on_devices, spec.seed, self._sharding, self.to_global
            )

    def _sharding(self, ndim: int) -> Any:
        if ndim not in self._by_rank:
            self._by_rank[ndim] = hosts.sharding_for_rank(self.sharding, ndim)
        return self._by_rank[ndim]

    def to_global(self, value: np.ndarray) -> Any:
        """This host's rows of one key -> the global jax.Array over the batch sharding."""
        import jax

        global_shape = (self.global_batch_size, *value.shape[1:])
        return jax.make_array_from_process_local_data(
            self._sharding(value.ndim), value, global_shape
        )

    def map(self, batch: Batch) -> Batch:
        batch = dict(batch)
        positions = batch.pop(POSITIONS_KEY, None)
        cameras = {k: v for k, v in batch.items() if isinstance(v, EncodedFrames)}
        out = {}
        if cameras:
            shapes = {k: self.sample_shapes[k] for k in cameras}
            out = self.decoder.decode_to_global(
                cameras, shapes, self._sharding, self.rows, self.global_batch_size
            )
        for key, value in batch.items():
            if key in cameras:
                continue
            if is_host_only(value):  # strings a caller asked for with `keys`
                out[key] = value
            else:
                out[key] = self.to_global(value)
        if self.on_devices is not None:
            out = self.on_devices(out, positions)
        return {k: out[k] for k in batch}

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.close()


def _on_gpus(sharding: Any) -> bool:
    return all(d.platform == "gpu" for d in sharding.addressable_devices)
