"""Which rows of each global batch this host reads (jaxload.batch.hosts): an equal
contiguous part per simulated host, or the rows this process's devices hold under a
sharding, and per device which of them it holds.

One process with one CPU device here: where a sharding over several processes is needed,
`_ProcessShards` stands in for it (what NamedSharding reports to one process of many:
the batch slices of its devices); the single-device cases use a real NamedSharding.
"""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxload.batch import hosts


class _ProcessShards:
    """A NamedSharding as one process of several sees it: its devices hold `slices` of
    the batch axis; the mesh has `mesh_shape` devices per axis."""

    def __init__(self, slices, spec=None, mesh_shape=None):
        self.slices, self.spec = slices, P("data") if spec is None else spec
        self.mesh = types.SimpleNamespace(shape=mesh_shape or {"data": len(slices) * 2})

    def addressable_devices_indices_map(self, shape):
        return {f"device{i}": (s,) + (slice(None),) * (len(shape) - 1) for i, s in
                enumerate(self.slices)}  # fmt: skip


def _mesh_sharding(spec=None):
    return NamedSharding(jax.make_mesh((1,), ("data",)), P("data") if spec is None else spec)


def test_hosts_default_to_jaxs_processes_and_an_override_is_checked():
    assert hosts.resolve_hosts(None, None) == (jax.process_index(), jax.process_count())
    assert hosts.resolve_hosts(2, 4) == (2, 4)
    assert hosts.resolve_hosts(0, None) == (0, jax.process_count())
    for index, count in [(4, 4), (-1, 4), (0, 0)]:
        with pytest.raises(ValueError, match=f"0 <= host_index < host_count, got {index} of"):
            hosts.resolve_hosts(index, count)


def test_each_host_reads_an_equal_contiguous_part():
    parts = [hosts.host_rows(12, h, 3).tolist() for h in range(3)]
    assert parts == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert hosts.host_rows(12, 0, 3).dtype == np.int64
    with pytest.raises(ValueError, match="global_batch_size 10 is not divisible by the host"):
        hosts.host_rows(10, 0, 3)


def test_the_rows_a_processs_devices_hold_are_sorted_and_unique():
    assert hosts.sharding_rows(_mesh_sharding(), 8).tolist() == list(range(8))
    assert hosts.sharding_rows(_mesh_sharding(P()), 8).tolist() == list(range(8))  # replicated
    # Devices listed out of batch order, and two replicas of one slice: each row once, sorted.
    shards = _ProcessShards([slice(24, 28), slice(8, 12), slice(8, 12)])
    rows = hosts.sharding_rows(shards, 32)
    assert rows.tolist() == [*range(8, 12), *range(24, 28)] and rows.dtype == np.int64


def test_a_sharding_is_cut_to_an_arrays_rank():
    sharding = _mesh_sharding(P("data", None, None))
    cut = hosts.sharding_for_rank(sharding, 1)
    assert cut.spec == P("data") and cut.mesh == sharding.mesh
    assert hosts.sharding_for_rank(sharding, 3).spec == P("data", None, None)


def test_this_hosts_rows_without_and_with_a_sharding():
    rows, count = hosts.this_host_rows(8, None, 1, 2)
    assert rows.tolist() == [4, 5, 6, 7] and count == 2
    rows, count = hosts.this_host_rows(8, _mesh_sharding(), None, None)
    assert rows.tolist() == list(range(8)) and count == jax.process_count()
    # This process's own index and count are no simulation: allowed.
    same = hosts.this_host_rows(8, _mesh_sharding(), jax.process_index(), jax.process_count())
    assert same[0].tolist() == list(range(8))
    with pytest.raises(ValueError, match="with `sharding` the rows come from the devices"):
        hosts.this_host_rows(8, _mesh_sharding(), 0, 2)


@pytest.mark.parametrize(
    "spec, mesh_shape, batch, shards",
    [
        (P("data"), {"data": 4, "model": 2}, 6, 4),
        (P(("data", "model")), {"data": 4, "model": 2}, 12, 8),  # two axes shard the batch
    ],
)
def test_the_batch_must_split_evenly_over_the_batch_shards(spec, mesh_shape, batch, shards):
    sharding = _ProcessShards([slice(0, 1)], spec=spec, mesh_shape=mesh_shape)
    with pytest.raises(ValueError, match=f"not divisible by the {shards} batch shards"):
        hosts.this_host_rows(batch, sharding, None, None)
    # A replicated batch axis has one shard: any size splits.
    replicated = _ProcessShards([slice(None)], spec=P(None, "model"), mesh_shape=mesh_shape)
    assert hosts.this_host_rows(batch, replicated, None, None)[0].tolist() == list(range(batch))
