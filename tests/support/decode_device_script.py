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


def compare(paths, **kw):
    """decode_device="device" gives the batches decoding in the workers gives, bit for bit
    (CPU devices decode as the workers do)."""
    sharding = NamedSharding(jax.make_mesh((4,), ("data",)), P("data"))
    common = dict(global_batch_size=16, seed=5, sharding=sharding, **kw)
    on_device = make_loader(
        paths, decode_device="device", options=PipelineOptions(num_workers=1), **common
    )
    in_workers = make_loader(
        paths, decode_device="cpu", options=PipelineOptions(num_workers=0), **common
    )
    assert on_device.spec.placement.encoded == ("observation.image",)
    with on_device, in_workers:
        for _ in range(3):
            got, want = next(on_device), next(in_workers)
            assert sorted(got) == sorted(want)
            image = got["observation.image"]
            assert isinstance(image, jax.Array) and len(image.addressable_shards) == 4
            for key in want:
                assert np.array_equal(np.asarray(got[key]), np.asarray(want[key])), key


if __name__ == "__main__":
    path = sys.argv[1]
    assert jax.device_count() == 4
    compare(path, delta_timestamps=WINDOW)
    compare(path)  # a camera without window: (H, W, 3) per sample
    # A mixture: each dataset's encoded frames are merged into batch order.
    compare(
        [path, path], episodes=[[0, 1, 2], [3, 4, 5]], weights=[0.5, 0.5], delta_timestamps=WINDOW
    )
    print("OK")
