"""What a sheet's rows hold (jaxload.tools.show.rows): cameras and vector keys found by shape,
padded slots and missing cameras told apart, frames as uint8, who each sample is, and a
global jax.Array brought to the host as this process's rows."""

from __future__ import annotations

import numpy as np

from jaxload.tools.show import show
from tests.tools.show.sheets import mixture_batch, png


def test_global_jax_arrays_draw_the_same_sheet_as_numpy(tmp_path):
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    batch = mixture_batch(rows=4)
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    placed = {
        k: v if v.dtype.kind == "U" else jax.device_put(v, NamedSharding(mesh, P("data")))
        for k, v in batch.items()
    }
    assert isinstance(placed["action"], jax.Array)
    show(batch, tmp_path / "numpy.png")
    show(placed, tmp_path / "jax.png")
    assert np.array_equal(png(tmp_path / "numpy.png"), png(tmp_path / "jax.png"))


def test_a_multi_host_array_gives_this_process_rows():
    """A global jax.Array of several processes cannot be made in one; this stands in for
    one (jax's own shards of a real array, reported as not fully addressable) and checks
    that its addressable rows come in order, replicas once."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxload.tools.show.rows import host_rows

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    x = np.arange(8 * 3).reshape(8, 3)
    array = jax.device_put(x, NamedSharding(mesh, P("data")))

    class Partial:
        is_fully_addressable = False
        addressable_shards = list(reversed(array.addressable_shards)) * 2  # order, replicas

    assert np.array_equal(host_rows(Partial()), x)
