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


# The integration tier: modules that convert datasets end to end, start worker or
# measurement processes, or run the benchmarks and examples. `pytest -m "not integration"`
# is the fast tier (under a minute); the README's test command runs both.
INTEGRATION_MODULES = {
    "test_bad_input",
    "test_bench",
    "test_bench_convert",
    "test_bytes_read",
    "test_cli_remote",
    "test_convert",
    "test_convert_engines",
    "test_convert_faults",
    "test_convert_kinds",
    "test_convert_remote",
    "test_convert_resume",
    "test_convert_to_s3",
    "test_convert_v21",
    "test_docstrings",
    "test_doctor",
    "test_faults",
    "test_lerobot_factory",
    "test_loader_lerobot",
    "test_multihost",
    "test_parity",
    "test_remote",
    "test_speed",
    "test_stats",
    "test_torchcodec_import",
    "test_train_example",
    "test_video_determinism",
    "test_worker_faults",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rpartition(".")[2] in INTEGRATION_MODULES:
            item.add_marker(pytest.mark.integration)
