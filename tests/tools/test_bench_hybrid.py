"""benchmarks/bench_hybrid.py on a tiny dataset, so it cannot rot: every path runs against
the stand-in device (the CPU path, the device alone, hybrid held and moving) and the
results file has a rate and the training process's CPU for each, and the ratios."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.processes]


def test_bench_hybrid_measures_every_path_against_the_stand_in_device(tmp_path):
    out = tmp_path / "results_hybrid.json"
    args = ["--tiny", "--seconds", "0.5", "--shares", "0.5", "--cache", str(tmp_path), "--out", str(out)]  # fmt: skip
    environ = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "bench_hybrid.py"), *args],
        env=environ, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    record = json.loads(out.read_text())
    paths = [r["path"] for r in record["runs"]]
    assert paths == ["cpu", "device", "hybrid@0.5", "hybrid"]
    for run in record["runs"]:
        assert run["samples_per_s"] > 0 and run["main_cpu_ms_per_batch"] > 0, run
    assert record["runs"][2]["share"] == 0.5  # held
    for ratio in record["summary"].values():
        assert math.isfinite(ratio) and ratio > 0
    assert "hybrid / (cpu + device alone)" in done.stdout
