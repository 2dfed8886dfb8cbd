"""What a batch holds, seen from a trainer: a missing key's KeyError says why and how to
get it (`keys=`), the batch goes into `jax.jit` as a dict does, and `element_spec`'s
dtypes are the batch's (int32 for int64 columns under `sharding`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxload
from jaxload import PipelineOptions
from tests.support.fake_dataset import FakeDataset

CAM = "observation.images.top"


def _loader(sources, **kw):
    kw.setdefault("options", PipelineOptions(num_workers=0))
    return jaxload.make_loader(sources, host_index=0, host_count=1, **kw)


def test_a_batch_says_why_a_key_is_missing_and_goes_into_jit():
    small = FakeDataset([5, 7], cameras={CAM: (6, 8, 3)}, state_dim=3)
    loader = _loader(small, global_batch_size=4)
    batch = next(loader)
    with pytest.raises(KeyError, match=r"'task' holds strings.*keys=\[\.\.\., 'task'\]"):
        batch["task"]
    with pytest.raises(KeyError, match="one-dataset loader"):
        batch["dataset_index"]
    with pytest.raises(KeyError, match=r"no 'action_is_pad'.*delta_frames"):
        batch["action_is_pad"]
    assert batch.get("task") is None and isinstance(batch, dict)
    total = jax.jit(lambda b: sum(jnp.sum(v.astype(jnp.float32)) for v in b.values()))(batch)
    assert np.isfinite(float(total))
    assert type(jax.tree.map(lambda x: x, batch)) is type(batch)
    picked = _loader(small, global_batch_size=4, keys=["action"])
    with pytest.raises(KeyError, match=r"not among the keys= given"):
        next(picked)["observation.state"]


def test_element_spec_dtypes_are_the_batchs_under_sharding():
    small = FakeDataset([5, 7], cameras={CAM: (6, 8, 3)}, state_dim=3)
    large = FakeDataset([9, 4], cameras={CAM: (6, 8, 3)}, salt="b")
    mesh = jax.make_mesh((1,), ("data",))
    loader = _loader(
        [small, large],
        global_batch_size=4,
        sharding=NamedSharding(mesh, P("data")),
    )
    batch = next(loader)
    spec = loader.element_spec
    assert set(spec) == set(batch)
    for key, struct in spec.items():
        assert (batch[key].shape, batch[key].dtype) == (struct.shape, struct.dtype), key
    assert spec["index"].dtype == np.int32 and spec["dataset_index"].dtype == np.int32
