"""A converted two-camera dataset (cameras of two sizes, GOPs of 4 frames) shared by the
decode tests."""

import pytest

from jaxload.converters.convert import convert
from tests.support.lerobot_factory import write_lerobot_v3

CAMERAS = {"observation.images.top": (48, 64), "observation.images.wrist": (40, 72)}
WINDOWS = {"observation.images.top": [-0.1, 0.0], "action": [0.0, 0.1]}


@pytest.fixture(scope="package")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("dev")
    src = write_lerobot_v3(root / "src", episode_lengths=(12, 3, 30, 9), cameras=CAMERAS)
    convert(src, root / "ds", workers=1, gop=4, progress=False)
    return root / "ds"
