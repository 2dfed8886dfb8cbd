"""`ToGlobalArrays` (numpy rows -> global jax.Arrays) built from a spec
(tests/support/specs.py), without make_loader."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxload.stages.read_batch import ReadBatch
from jaxload.stages.to_global import ToGlobalArrays
from tests.support.fake_dataset import FakeDataset
from tests.support.specs import loader_spec


def test_to_global_arrays_makes_the_rows_global_arrays_over_the_sharding():
    devices = jax.devices()
    sharding = NamedSharding(jax.make_mesh((len(devices),), ("data",)), P("data"))
    g = 2 * len(devices)
    keys = ["observation.state", "observation.images.top", "index", "task"]
    spec, datasets = loader_spec(
        FakeDataset([9, 4]), global_batch_size=g, sharding=sharding, keys=keys
    )
    rows = ReadBatch(spec.for_readers(), datasets, 0).map(1)
    out = ToGlobalArrays(spec).map(dict(rows))
    try:
        for key in keys[:-1]:
            assert isinstance(out[key], jax.Array) and out[key].shape[0] == g
            assert out[key].sharding.is_equivalent_to(
                NamedSharding(sharding.mesh, P("data")), out[key].ndim
            )
            np.testing.assert_array_equal(np.asarray(out[key]), rows[key].astype(out[key].dtype))
        assert isinstance(out["task"], np.ndarray)  # strings stay host-local numpy
    finally:
        datasets.close()
