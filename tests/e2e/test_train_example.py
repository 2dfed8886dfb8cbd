"""examples/train_pjit.py end to end on 4 forced CPU devices: loss falls, kill + --restore is exact."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "train_pjit.py"
ENV = {
    **os.environ,
    "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
    "JAX_PLATFORMS": "cpu",
    "PYTHONUNBUFFERED": "1",
}
ARGS = ["--steps", "40", "--batch-size", "16", "--save-every", "10", "--log-every", "10"]


def _cmd(workdir, dataset, *extra):
    return [
        sys.executable,
        str(SCRIPT),
        "--workdir",
        str(workdir),
        "--dataset",
        str(dataset),
        *ARGS,
        *extra,
    ]


def _run(workdir, dataset, *extra):
    out = subprocess.run(
        _cmd(workdir, dataset, *extra),
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout


def _digest(stdout):
    return re.search(r"final step 40 params sha256 ([0-9a-f]{64})", stdout).group(1)


def _run_until_killed(workdir, dataset, after_line):
    """Start a run in its own process group and SIGKILL all of it (workers too) at a log line."""
    proc = subprocess.Popen(
        _cmd(workdir, dataset),
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith(after_line):
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert any(line.startswith(after_line) for line in seen), "".join(seen)[-2000:]
    return "".join(seen)


def test_train_pjit_straight_and_killed_then_restored_match(tmp_path):
    dataset = tmp_path / "dataset"
    straight = _run(tmp_path / "straight", dataset)  # also converts the bundled example
    first, last = map(float, re.search(r"loss first10 ([\d.]+) last10 ([\d.]+)", straight).groups())
    assert last < 0.8 * first, straight

    killed = _run_until_killed(tmp_path / "resumed", dataset, after_line="step 30 ")
    assert "saved step 20" in killed and "final step" not in killed
    resumed = _run(tmp_path / "resumed", dataset, "--restore")
    # Orbax may not have committed the last async save before the kill: any earlier
    # checkpoint resumes exactly too.
    assert re.search(r"restored step (10|20|30) ", resumed), resumed
    assert _digest(resumed) == _digest(straight)
