"""The LeRobot reference (jaxload.tools.bench.lerobot): LeRobotDataset in a torch DataLoader
as openpi builds it, lerobot imported lazily with a clear error when it is missing."""

import pytest


@pytest.mark.integration  # with the benchmark harness's tests (tests/tools/test_bench.py)
def test_lerobot_reference_error_names_the_install_script(monkeypatch):
    from jaxload.tools.bench import lerobot as bench_lerobot

    monkeypatch.setattr(bench_lerobot, "lerobot_available", lambda: False)
    with pytest.raises(ImportError, match=r"install_lerobot\.sh"):
        bench_lerobot.import_lerobot_dataset()
