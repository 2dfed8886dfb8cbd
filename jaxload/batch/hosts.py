"""Which rows of each global batch this host reads.

Without a sharding, host ``h`` of ``H`` reads rows ``[h*G/H, (h+1)*G/H)``. With a
``jax.sharding.Sharding`` the rows are the ones this process's devices hold (replicas
read the same rows), in increasing order, which is exactly the layout
``jax.make_array_from_process_local_data`` expects: row ``i`` of the global array is
then global position ``k*G + i`` whatever the mesh's device order.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def resolve_hosts(host_index: int | None, host_count: int | None) -> tuple[int, int]:
    """Fill in JAX's process index/count; validate an override used to simulate hosts."""
    if host_index is None or host_count is None:
        import jax

        host_index = jax.process_index() if host_index is None else host_index
        host_count = jax.process_count() if host_count is None else host_count
    if host_count < 1 or not 0 <= host_index < host_count:
        raise ValueError(f"need 0 <= host_index < host_count, got {host_index} of {host_count}")
    return int(host_index), int(host_count)


def host_rows(global_batch_size: int, host_index: int, host_count: int) -> np.ndarray:
    """This host's contiguous equal part of a global batch."""
    if global_batch_size % host_count:
        raise ValueError(
            f"global_batch_size {global_batch_size} is not divisible by the host count {host_count}"
        )
    per_host = global_batch_size // host_count
    return np.arange(host_index * per_host, (host_index + 1) * per_host, dtype=np.int64)


def sharding_rows(sharding, global_batch_size: int) -> np.ndarray:
    """Rows of a (G, ...) global array that this process's devices hold, sorted and unique."""
    # Probe with the rank the sharding's spec names; only the leading (batch) axis matters.
    rank = max(1, len(getattr(sharding, "spec", ()) or ()))
    index_map = sharding.addressable_devices_indices_map((global_batch_size,) + (1,) * (rank - 1))
    rows = np.zeros(global_batch_size, bool)
    for index in index_map.values():
        rows[index[0] if index else slice(None)] = True
    return np.flatnonzero(rows).astype(np.int64)


def sharding_for_rank(sharding, ndim: int):
    """The NamedSharding's spec cut to an array's rank (a scalar-per-sample key has rank 1)."""
    from jax.sharding import NamedSharding, PartitionSpec

    spec = tuple(sharding.spec)[:ndim]
    return NamedSharding(sharding.mesh, PartitionSpec(*spec))


def this_host_rows(
    global_batch_size: int, sharding: Any, host_index: int | None, host_count: int | None
) -> tuple[np.ndarray, int]:
    """This host's rows of each global batch, and the host count recorded in the state."""
    if sharding is None:
        index, count = resolve_hosts(host_index, host_count)
        return host_rows(global_batch_size, index, count), count
    import jax

    if (host_index, host_count) not in ((None, None), (jax.process_index(), jax.process_count())):
        raise ValueError(
            "host_index/host_count simulate hosts for numpy batches; with `sharding` the rows "
            "come from the devices of this process, so leave them unset"
        )
    batch_axes = sharding.spec[0] if len(sharding.spec) else None
    axes = (
        () if batch_axes is None else (batch_axes,) if isinstance(batch_axes, str) else batch_axes
    )
    shards = int(np.prod([sharding.mesh.shape[a] for a in axes]))
    if global_batch_size % shards:
        raise ValueError(
            f"global_batch_size {global_batch_size} is not divisible by the {shards} batch shards "
            f"of the sharding {sharding.spec}"
        )
    return sharding_rows(sharding, global_batch_size), jax.process_count()
