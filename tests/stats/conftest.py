"""The shared LeRobot fixtures converted once for the stats tests."""

import pytest

from tests.stats.test_stream import SHARED
from tests.support.helpers import converted


@pytest.fixture(scope="module")
def shared(shared_lerobot, tmp_path_factory):
    return {n: converted(tmp_path_factory, shared_lerobot / n) for n in SHARED}
