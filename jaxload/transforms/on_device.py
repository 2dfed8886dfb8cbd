"""Image transforms on the devices: jitted over the global batch, after decode.

The training process's prefetch thread holds this host's rows of a batch as global
jax.Arrays; each row's parameters are drawn here on the host from its global position
(the same draws the CPU path makes), become global arrays sharded like the batch, and one
jitted function transforms every camera on the devices that hold its rows.

    run = TransformOnDevices(augment.resolved(cameras), seed, sharding_for, to_global)
    batch = run(batch, positions)  # positions: this host's rows' global positions
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxload.transforms.compose import ImageTransforms

# A batch key ReadBatch adds when the devices transform: this host's rows' global
# positions (numpy; never a jax.Array, never in a delivered batch).
POSITIONS_KEY = "__jaxload_positions__"


class TransformOnDevices:
    """Applies bound `ImageTransforms` to a batch of global jax.Arrays (see module doc)."""

    def __init__(
        self,
        transforms: ImageTransforms,
        seed: int,
        sharding_for: Callable[[int], Any],
        to_global: Callable[[np.ndarray], Any],
    ):
        if transforms.keys is None:
            raise ValueError("TransformOnDevices needs transforms bound to cameras (resolved())")
        self.transforms, self.seed = transforms, int(seed)
        # the batch sharding for a rank, and host rows -> global array (ToGlobalArrays')
        self.sharding_for, self.to_global = sharding_for, to_global
        self._jitted: dict[tuple, Any] = {}

    def __call__(self, batch: Mapping[str, Any], positions: np.ndarray) -> dict[str, Any]:
        import jax

        keys = [k for k in self.transforms.keys if k in batch]
        frames = {k: batch[k] for k in keys}
        params = {
            k: [
                {name: self._global(v) for name, v in step.items()}
                for step in self.transforms.draw(k, positions, self.seed, batch[k].shape[1:])
            ]
            for k in keys
        }
        signature = tuple((k, frames[k].shape, str(frames[k].dtype)) for k in keys)
        if signature not in self._jitted:
            out_shapes = {k: self.transforms.output_shape(frames[k].shape[1:]) for k in keys}
            shardings = {k: self.sharding_for(1 + len(out_shapes[k])) for k in keys}
            self._jitted[signature] = jax.jit(self.transforms.apply_jax, out_shardings=shardings)
        out = dict(batch)
        # The batch's mesh as the context: with Explicit axes, gathers (rotation's sampling)
        # need it to type their sharded operands.
        mesh = getattr(next(iter(frames.values())).sharding, "mesh", None)
        with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
            out.update(self._jitted[signature](frames, params))
        return out

    def _global(self, local: np.ndarray) -> Any:
        # float64 parameters of a custom step: JAX would make them float32 anyway
        return self.to_global(local.astype(np.float32) if local.dtype == np.float64 else local)
