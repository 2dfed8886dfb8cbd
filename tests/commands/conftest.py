"""A small LeRobot source and its conversion, shared by the command tests (once per session)."""

from __future__ import annotations

import pytest

from jaxload.converters.convert import convert
from tests.support.lerobot_factory import write_lerobot_v3


@pytest.fixture(scope="session")
def lerobot_src(tmp_path_factory):
    """LeRobot v3.0: episodes of 5 and 3 frames, one 48x64 H.264 camera, 10 fps."""
    return write_lerobot_v3(tmp_path_factory.mktemp("commands") / "src", episode_lengths=(5, 3))


@pytest.fixture(scope="session")
def converted(lerobot_src, tmp_path_factory):
    """`lerobot_src` converted in this process (one worker: no process starts)."""
    out = tmp_path_factory.mktemp("commands") / "ds"
    convert(lerobot_src, out, workers=1, progress=False)
    return out
