"""A real 2-process JAX job on CPU: sharded global batches and Orbax state across processes."""

import os
import subprocess
import sys
from pathlib import Path

import portpicker
import pytest

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]


def test_two_processes_assemble_the_global_batch_and_share_the_state(tmp_path):
    port = str(portpicker.pick_unused_port())
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
    }
    cmd = [sys.executable, "-m", "tests.support.multihost_worker"]
    procs = [
        subprocess.Popen(
            [*cmd, str(i), port, str(tmp_path / "ckpt")],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=300))
    finally:
        for proc in procs:
            proc.kill()
    for i, (proc, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert proc.returncode == 0 and f"OK process {i}" in out, err[-3000:]
    # Only the primary process wrote the (global) state; both restored from it.
    assert (tmp_path / "ckpt" / "3" / "loader" / "loader_state.json").is_file()
