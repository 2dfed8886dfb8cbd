"""Image transforms on the devices (jaxload.transforms.on_device): a batch of global
jax.Arrays transformed by one jitted function with each row's parameters drawn from its
global position, as the CPU path draws them. Here on the one JAX CPU device (no GPU
exists here; the jitted code is the one a GPU runs); several devices and a real loader:
tests/transforms/test_compose.py::test_loader_transforms_on_devices_match_the_cpu_path."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxload.batch.hosts import sharding_for_rank
from jaxload.transforms import ImageTransform, ImageTransforms, RandomCrop, Resize
from jaxload.transforms.on_device import TransformOnDevices
from tests.transforms.test_compose import _frames

CAMERAS = {"top": (60, 80, 3), "wrist": (2, 60, 80, 3)}  # wrist with a window of 2


def _run(transforms: ImageTransforms, seed: int = 3) -> TransformOnDevices:
    sharding = NamedSharding(jax.make_mesh((1,), ("data",)), P("data"))

    def sharding_for(ndim):
        return sharding_for_rank(sharding, ndim)

    def to_global(local):
        return jax.device_put(local, sharding_for(local.ndim))

    return TransformOnDevices(transforms.resolved(CAMERAS), seed, sharding_for, to_global)


def _batch(run: TransformOnDevices, rows: int = 4) -> dict:
    """A batch of global arrays sharded as the loader's (ToGlobalArrays.to_global)."""
    local = {
        "top": _frames(rows, seed=1),
        "wrist": np.stack([_frames(rows, seed=2), _frames(rows, seed=3)], 1),
        "action": np.arange(rows, dtype=np.float32),
    }
    return {k: run.to_global(v) for k, v in local.items()}


def test_device_crops_are_the_cpu_crops_of_the_rows_at_their_positions():
    augment = ImageTransforms([RandomCrop((30, 40))])
    run = _run(augment)
    batch, positions = _batch(run), np.array([10, 11, 40, 7])
    out = run(batch, positions)
    numpy_batch = {k: np.asarray(v) for k, v in batch.items()}
    expected = augment.apply(numpy_batch, positions, seed=3)
    for key in ("top", "wrist"):
        assert isinstance(out[key], jax.Array) and out[key].sharding.spec == P("data")
        np.testing.assert_array_equal(np.asarray(out[key]), expected[key])  # crops: exact
    assert out["action"] is batch["action"]  # not a camera: passed as it is
    assert run.transforms.keys == ("top", "wrist")


def test_one_jitted_function_per_batch_shape():
    run = _run(ImageTransforms([Resize((24, 32))], keys=["top"], dtype="float32"))
    first = run(_batch(run, 4), np.arange(4))
    run(_batch(run, 4), np.arange(4, 8))
    assert len(run._jitted) == 1
    run(_batch(run, 2), np.arange(2))  # a smaller batch (another shape): one more
    assert len(run._jitted) == 2
    assert first["top"].dtype == np.float32 and first["top"].shape == (4, 24, 32, 3)
    assert first["wrist"].dtype == np.uint8  # not in keys
    assert float(first["top"].min()) >= 0.0 and float(first["top"].max()) <= 1.0


class Shift(ImageTransform):
    """A custom step with float64 parameters (JAX would make them float32)."""

    num_uniforms = 1

    def draw(self, u, size):
        return {"amount": u[:, 0] * 10.0}

    def apply_numpy(self, frames, params):
        return np.clip(frames + params["amount"][:, None, None, None, None], 0, 255)

    def apply_jax(self, frames, params):
        return frames + params["amount"][:, None, None, None, None]


def test_float64_parameters_of_a_custom_step_go_to_the_devices_as_float32():
    seen = []
    run = _run(ImageTransforms([Shift()], keys=["top"]))
    batch, to_global = _batch(run), run.to_global
    run.to_global = lambda local: seen.append(local.dtype) or to_global(local)
    out = run(batch, np.arange(4))
    assert seen == [np.float32]
    cpu = ImageTransforms([Shift()], keys=["top"]).apply(
        {"top": _frames(4, seed=1)}, np.arange(4), seed=3
    )["top"]
    assert np.abs(np.asarray(out["top"], int) - cpu.astype(int)).max() <= 1


def test_unbound_transforms_are_refused():
    with pytest.raises(ValueError, match=r"needs transforms bound to cameras \(resolved\(\)\)"):
        TransformOnDevices(ImageTransforms([Resize((8, 8))]), 0, None, None)
