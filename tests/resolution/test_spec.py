"""`LoaderSpec` (jaxload.resolution.spec), a value: compared by what it defines, cheap to
pickle without opened datasets, and what it derives: the batch's element spec, the state
at a position, the readers' copy, and which episodes a batch reads (for messages)."""

from __future__ import annotations

import dataclasses
import pickle

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxload.resolution.spec import _few
from jaxload.transforms import Resize
from tests.support.fake_dataset import FakeDataset
from tests.support.specs import loader_spec


def _named(name: str, lengths, **kwargs) -> FakeDataset:
    ds = FakeDataset(lengths, salt=name, **kwargs)
    ds.path = name
    return ds


@pytest.fixture
def sharding():
    return NamedSharding(jax.make_mesh((1,), ("data",)), P("data"))


def test_specs_compare_by_what_they_define_and_pickle_without_datasets():
    a = _named("a", [5, 7, 3])
    spec, _ = loader_spec(a, global_batch_size=4, seed=2)
    again, _ = loader_spec(_named("a", [5, 7, 3]), global_batch_size=4, seed=2)
    assert spec == again and hash(spec) == hash(again)  # other objects, the same definition
    assert spec != loader_spec(a, global_batch_size=4, seed=3)[0]
    assert spec != loader_spec(a, global_batch_size=4, seed=2, shuffle=False)[0]
    assert spec != loader_spec(a, global_batch_size=4, seed=2, keys=["index"])[0]
    assert spec != loader_spec(a, global_batch_size=4, seed=2, drop_n_last_frames=1)[0]
    assert spec.__eq__(object()) is NotImplemented
    data = pickle.dumps(spec)
    assert pickle.loads(data) == spec
    assert b"FakeDataset" not in data and len(data) < 10_000  # no dataset travels with it


def test_the_element_spec_is_this_hosts_numpy_rows_of_the_keys_a_batch_holds():
    spec, _ = loader_spec(_named("a", [5, 7]), global_batch_size=4, host_index=1, host_count=2)
    element = spec.element_spec
    assert element["observation.images.top"] == jax.ShapeDtypeStruct((2, 6, 8, 3), np.uint8)
    assert element["index"] == jax.ShapeDtypeStruct((2,), np.int64)  # numpy keeps int64
    assert "task" not in element  # strings are no arrays
    chosen, _ = loader_spec(_named("a", [5, 7]), global_batch_size=4, keys=["index", "task"])
    assert list(chosen.element_spec) == ["index"]


def test_the_element_spec_with_sharding_is_global_after_the_devices_transforms(sharding):
    spec, _ = loader_spec(
        _named("a", [5, 7]),
        global_batch_size=4,
        sharding=sharding,
        host_index=None,
        host_count=None,
        image_transforms=[Resize((4, 4))],
        image_transforms_on="device",
    )
    element = spec.element_spec
    assert element["observation.images.top"].shape == (4, 4, 4, 3)  # after the Resize
    # As the jax.Arrays have it: int64 is int32 unless jax_enable_x64.
    assert element["index"].dtype == np.dtype(jax.dtypes.canonicalize_dtype(np.int64))
    readers = spec.for_readers()
    assert readers.sharding is None and readers.placement == spec.placement
    assert readers.element_spec["index"].shape == (4,)  # this host's rows: all 4 of one host
    unsharded, _ = loader_spec(_named("a", [5, 7]), global_batch_size=4)
    assert unsharded.for_readers() is unsharded


def test_the_state_at_a_position_records_the_order_and_the_datasets():
    a, b = _named("a", [5, 7]), _named("b", [6])
    spec, _ = loader_spec([a, b], global_batch_size=4, seed=5, mixture_block_size=3)
    state = spec.state_at(37)
    assert (state.position, state.epoch) == (37, 37 // spec.stream.epoch_size) == (37, 2)
    assert state.seed == 5 and state.global_batch_size == 4 and state.host_count == 1
    assert state.fingerprint == spec.fingerprint and state.sources == ("a", "b")
    assert state.dataset_fingerprints == spec.dataset_fingerprints
    assert state.mixture_quota == tuple(spec.stream.mixture.quota.tolist()) == (2, 1)
    assert state.epoch_size == 18 and state.views == tuple(dict(v) for v in spec.views)
    single, _ = loader_spec(a, global_batch_size=4)
    assert single.state_at(0).mixture_quota == ()


def test_describe_names_a_batchs_positions_and_the_episodes_they_fall_in():
    a = _named("a", [5, 7, 3], episode_index=[10, 20, 30])
    spec, _ = loader_spec(a, global_batch_size=4, seed=2)
    for k in range(4):
        positions = spec.positions(0, k)
        _, rows = spec.stream.locate(positions)
        starts = np.array([0, 5, 12])
        episodes = sorted({[10, 20, 30][np.searchsorted(starts, r, "right") - 1] for r in rows})
        want = f"global positions {positions.min()}..{positions.max()}: a episodes {episodes}"
        assert spec.describe(0, k) == want
    two, _ = loader_spec([a, _named("b", [8])], global_batch_size=8, mixture_block_size=8)
    message = two.describe(0, 0)
    assert "a episodes [" in message and "; b episodes [0]" in message


def test_a_long_episode_list_is_cut_for_messages():
    assert _few(list(range(3))) == "[0, 1, 2]"
    assert _few(list(range(8))) == "[0, 1, 2, 3, 4, 5, 6, 7]"
    assert _few(list(range(9))) == "[0, 1, 2, 3, 4, 5, 6, 7, ...]"


def test_a_spec_is_frozen():
    spec, _ = loader_spec(_named("a", [5]), global_batch_size=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 1
