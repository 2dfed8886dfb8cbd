"""`build_pipeline` from a spec (tests/support/specs.py), without make_loader or a
`Loader`: the stages put together serve ReadBatch's batches in order."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxload.stages.pipeline import build_pipeline
from jaxload.stages.read_batch import ReadBatch
from jaxload.stages.to_global import ToGlobalArrays
from tests.support.fake_dataset import FakeDataset
from tests.support.specs import loader_spec


def test_build_pipeline_serves_the_read_batches_in_order_then_stops():
    spec, datasets = loader_spec(FakeDataset([7, 5]), global_batch_size=3)
    try:
        expected = [ReadBatch(spec, datasets, 1).map(k) for k in range(3)]
        it = iter(build_pipeline(ReadBatch(spec, datasets, 1), 3, None, None))
        got = list(it)
        assert len(got) == 3
        for want, batch in zip(expected, got, strict=True):
            assert batch.keys() == want.keys()
            for key in want:
                np.testing.assert_array_equal(batch[key], want[key])
        assert got[0]["index"].tolist() != got[1]["index"].tolist()
    finally:
        datasets.close()


def test_build_pipeline_ends_in_global_arrays_with_a_sharding():
    devices = jax.devices()
    sharding = NamedSharding(jax.make_mesh((len(devices),), ("data",)), P("data"))
    spec, datasets = loader_spec(
        FakeDataset([9, 4]), global_batch_size=2 * len(devices), sharding=sharding
    )
    try:
        want = ReadBatch(spec.for_readers(), datasets, 0).map(0)
        pipeline = build_pipeline(
            ReadBatch(spec.for_readers(), datasets, 0), 1, ToGlobalArrays(spec), None
        )
        (batch,) = list(iter(pipeline))
        for key, value in want.items():
            assert isinstance(batch[key], jax.Array)
            np.testing.assert_array_equal(np.asarray(batch[key]), value.astype(batch[key].dtype))
    finally:
        datasets.close()
