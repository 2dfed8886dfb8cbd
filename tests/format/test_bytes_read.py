"""Reading one windowed sample reads O(window + GOP) bytes, never a whole episode.

Bytes are counted with the kernel's per-process read counter (/proc/self/io rchar), which
sees every read() the ArrayRecord reader makes. A 30-frame and a 3000-frame episode must
cost the same per sample.
"""

import os
from pathlib import Path

import numpy as np
import pytest

import jaxload
from jaxload.converters.convert import convert
from tests.support.lerobot_factory import write_lerobot_v3

FPS = 30
WINDOWS = {
    "action": [k / FPS for k in range(16)],
    "observation.state": [-2 / FPS, -1 / FPS, 0.0],
    "observation.images.top": [-1 / FPS, 0.0],
}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not Path("/proc/self/io").exists(), reason="needs Linux's per-process I/O counters"
    ),
]


def _bytes_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("bytes")
    src = write_lerobot_v3(root / "src", fps=FPS, episode_lengths=(30, 3000))
    convert(src, root / "ds", workers=1, progress=False)
    return root / "ds"


def test_bytes_per_sample_do_not_grow_with_episode_length(dataset):
    ds = jaxload.open(dataset, delta_timestamps=WINDOWS)
    ds[0]  # opens the shard reader (reads its index once per thread)
    cost = {}
    for name, anchors in {"short": range(2, 30, 3), "long": range(40, 3030, 300)}.items():
        per_sample = []
        for i in anchors:
            before = _bytes_read()
            ds[i]
            per_sample.append(_bytes_read() - before)
        cost[name] = np.array(per_sample)
    long_episode_bytes = os.path.getsize(dataset / "data/shard-00000.array_record")
    assert cost["long"].max() < 0.1 * long_episode_bytes, cost
    assert cost["long"].mean() < 2 * cost["short"].mean(), cost
    assert cost["long"].max() < 64 * 1024, cost
