"""Shared pytest set-up."""

from pathlib import Path

import pytest
from absl import flags

# Grain's worker processes read absl flags; pytest never parses them.
flags.FLAGS.mark_as_parsed()

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_LEROBOT = REPO_ROOT.parent / "shared" / "data" / "lerobot"


@pytest.fixture(scope="session")
def shared_lerobot() -> Path:
    """The read-only LeRobot v3.0 fixtures (written by lerobot 0.4.4); skip when absent."""
    if not (SHARED_LEROBOT / "README.md").exists():
        pytest.skip(f"shared LeRobot fixtures not found at {SHARED_LEROBOT}")
    return SHARED_LEROBOT
