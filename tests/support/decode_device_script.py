"""decode_device="device" vs "cpu" on 4 CPU devices, for tests/pipeline/test_loader_lerobot.py.

    python -m tests.support.decode_device_script CONVERTED_VIDEO_DATASET

With "device" the workers hand over encoded GOPs and each of the 4 devices decodes its own
rows in this process; the batches must equal those decoded in the workers, bit for bit.
"""

import sys

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxload import PipelineOptions, make_loader

WINDOW = {"action": [0.0, 0.1], "observation.image": [-0.1, 0.0]}


def compare(paths, decode_device="device", batches=3, **kw):
    """`decode_device` ("device" or "hybrid") gives the batches decoding in the workers
    gives, bit for bit (CPU devices decode as the workers do)."""
    sharding = NamedSharding(jax.make_mesh((4,), ("data",)), P("data"))
    common = dict(global_batch_size=16, seed=5, sharding=sharding, **kw)
    on_device = make_loader(
        paths, decode_device=decode_device, options=PipelineOptions(num_workers=1), **common
    )
    in_workers = make_loader(
        paths, decode_device="cpu", options=PipelineOptions(num_workers=0), **common
    )
    assert on_device.spec.placement.encoded == ("observation.image",)
    shares = set()
    with on_device, in_workers:
        for _ in range(batches):
            got, want = next(on_device), next(in_workers)
            shares.add(on_device.decode_share)
            assert sorted(got) == sorted(want)
            image = got["observation.image"]
            assert isinstance(image, jax.Array) and len(image.addressable_shards) == 4
            for key in want:
                assert np.array_equal(np.asarray(got[key]), np.asarray(want[key])), key
    return shares


if __name__ == "__main__":
    path = sys.argv[1]
    assert jax.device_count() == 4
    compare(path, delta_timestamps=WINDOW)
    compare(path)  # a camera without window: (H, W, 3) per sample
    # A mixture: each dataset's encoded frames are merged into batch order.
    compare(
        [path, path], episodes=[[0, 1, 2], [3, 4, 5]], weights=[0.5, 0.5], delta_timestamps=WINDOW
    )
    # Hybrid: the workers decode a share of each device's rows, the devices the rest; the
    # share moves from batch to batch, and every batch stays the workers' own.
    # (24 batches: a move counts only batches read at the current share, and with the
    # workers forked at once from a running server up to ~8 were read ahead of the first.)
    shares = compare(path, decode_device="hybrid", batches=24, delta_timestamps=WINDOW)
    assert len(shares) > 1, shares  # the split moved
    compare(
        [path, path],
        decode_device="hybrid",
        episodes=[[0, 1, 2], [3, 4, 5]],
        weights=[0.5, 0.5],
        delta_timestamps=WINDOW,
    )
    print("OK")
