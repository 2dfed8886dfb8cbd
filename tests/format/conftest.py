"""What the format tests share: one small converted dataset with a camera, two shards and
a one-frame episode, converted once per session (read-only: tests that edit it copy it)."""

import pytest

from jaxload.converters.convert import convert
from tests.support.lerobot_factory import write_lerobot_v3

CAM = "observation.images.top"
LENGTHS = (5, 1, 40, 20)


@pytest.fixture(scope="session")
def camera_converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("format_converted")
    src = write_lerobot_v3(root / "src", episode_lengths=LENGTHS, cameras={CAM: (24, 64)})
    return convert(src, root / "out", workers=1, progress=False, shard_bytes=20000).out
