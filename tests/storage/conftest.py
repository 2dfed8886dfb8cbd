"""What the storage tests share: a small converted dataset (no cameras, several shards)
for the spec-built tests of the lookahead and the cache."""

import pytest

from jaxload.converters.convert import convert
from tests.support.lerobot_factory import write_lerobot_v3


@pytest.fixture(scope="session")
def small_converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("small_converted")
    lengths = (5, 6, 7, 8, 9, 10, 4, 6, 8, 5, 7, 9)
    src = write_lerobot_v3(root / "src", episode_lengths=lengths, cameras={})
    return convert(src, root / "out", workers=1, progress=False, shard_bytes=2000).out
