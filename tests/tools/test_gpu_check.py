"""scripts/gpu_check.sh, the project's one GPU command, as CI runs it: the dry run on CPU
(no GPU, no carry) writes the figures a GPU run writes; a size that outlives its deadline,
leaving a child behind, does not stop the next; and the summary of a run
(benchmarks/gpu_summary.py) says what each step left, a size cut short included."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest

from benchmarks import gpu_summary
from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "gpu_check.sh"


def run_check(tmp_path, **env) -> subprocess.CompletedProcess:
    path = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    environ = {
        **os.environ,
        "OUT": str(tmp_path / "out"),
        "PYTHON": sys.executable,
        "GPU_CHECK_MODE": "dry",  # also on a GPU host: what CI runs
        "PYTHONPATH": os.pathsep.join(path),
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT)], env=environ, capture_output=True, text=True, timeout=900
    )


def _positive(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


@pytest.mark.processes  # the script and the benchmark: about a minute on 2 cores
def test_the_dry_run_writes_every_figure(tmp_path):
    began = time.monotonic()
    done = run_check(tmp_path, GPU_FLAGS=f"--cache {tmp_path / 'cache'}")
    took = time.monotonic() - began
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    names = {p.name for p in out.iterdir()}
    assert names == {
        "summary.json",
        "summary.txt",
        "tests.log",
        "bench_gpu.log",
        "results_gpu_small.json",
    }
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "dry" and summary["ok"] is True
    assert summary["machine"]["versions"]["torchcodec"] and summary["machine"]["cores"] >= 1
    # The GPU tests are collected (they run in the suite): the selection still exists.
    assert summary["tests"]["status"] == "ok" and summary["tests"]["collected"] >= 20
    assert list(summary["sizes"]) == ["small"]
    small = summary["sizes"]["small"]
    assert small["status"] == "ok" and small["rc"] == 0
    figures = small["figures"]
    # CPU devices decode through the devices' path bit for bit like the readers.
    assert figures["accuracy_max_abs"] == {"h264": 0}
    assert set(figures["samples_per_s"]) == {"device", "cpu"}
    assert all(_positive(v) for v in figures["samples_per_s"].values()), figures
    assert all(_positive(v) for v in figures["nvdec_frames_per_s"].values()), figures
    assert _positive(figures["cpu_limit_samples_per_s"])
    assert _positive(figures["nvdec_loader_vs_limit"]), figures
    assert all(0 <= v <= 1 for v in figures["wait_fraction"].values())
    assert all(_positive(v) for v in figures["first_batch_s"].values())
    text = (out / "summary.txt").read_text()
    assert "gpu_check (dry): ok" in text and "size small: ok" in text
    assert "nvdec_loader_vs_limit" in text and "samples_per_s: device" in text
    assert "[" in (out / "bench_gpu.log").read_text()  # the stages' progress lines
    print(f"dry run: {took:.0f} s")


@pytest.mark.processes  # the script and a stuck benchmark
def test_a_size_past_its_deadline_does_not_stop_the_next(tmp_path):
    """Size "small" is ended by its own faulthandler deadline, "policy" ignores it and is
    killed by the script; each leaves a sleeping child holding its output. Both sizes are
    reported, with the stage the first one finished, and no child survives."""
    pids = tmp_path / "pids"
    began = time.monotonic()
    done = run_check(
        tmp_path,
        GPU_BENCH=str(REPO_ROOT / "tests" / "support" / "stuck_bench.py"),
        GPU_SIZES="small policy",
        GPU_DEADLINE="3",
        GPU_GRACE="2",
        GPU_TESTS="",
        STUCK_BENCH_PIDS=str(pids),
    )
    took = time.monotonic() - began
    assert done.returncode == 1, done.stdout + done.stderr  # not every step was ok
    assert took < 60, f"{took:.0f} s: the script waited for what the sizes left running"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["ok"] is False and "tests" not in summary
    sizes = summary["sizes"]
    assert list(sizes) == ["small", "policy"]
    assert {s["status"] for s in sizes.values()} == {"deadline"}
    assert sizes["small"]["figures"]["accuracy_max_abs"] == {"h264": 2}
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2
    time.sleep(0.5)
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    log = (tmp_path / "out" / "bench_gpu.log").read_text()
    assert "=== size small: deadline" in log and "=== size policy: deadline" in log
    assert "Timeout (" in log  # faulthandler's stacks, for the size that hit its deadline


def _summary_inputs(tmp_path, monkeypatch):
    """(the script's OUT folder, its steps.jsonl) for gpu_summary.build, on an H200 host
    as nvidia-smi would describe it."""
    machine = {"gpus": ["NVIDIA H200"], "cores": 16, "python": "3.12.3", "versions": {}}
    monkeypatch.setattr(gpu_summary, "machine", lambda: {**machine, "ffmpeg": "carried"})
    out = tmp_path / "out"
    out.mkdir()
    return out, tmp_path / "steps.jsonl"


def _write_steps(steps, records):
    steps.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_summary_reports_what_each_step_left(tmp_path, monkeypatch):
    """A size cut by its deadline after two stages keeps them (no ratio it cannot make);
    pytest's JUnit XML becomes counts and the failing tests' ids."""
    out, steps = _summary_inputs(tmp_path, monkeypatch)
    records = [
        {"step": "tests", "rc": 1, "seconds": 80, "limit": 150, "status": "failed"},
        {
            "step": "size",
            "rc": 1,
            "seconds": 170,
            "limit": 170,
            "status": "deadline",
            "size": "large",
        },
    ]
    _write_steps(steps, records)
    partial = {
        "size": "large",
        "devices": ["cuda:0"],
        "accuracy_max_abs": {"h264": 3},
        "nvdec_limit_frames_per_s": 3292.9,
    }
    (out / "results_gpu_large.json").write_text(json.dumps([partial]))
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest" tests="4" failures="1" errors="0" skipped="1">'
        '<testcase classname="tests.decode.test_nvdec" name="test_a"/>'
        '<testcase classname="tests.decode.test_nvdec" name="test_b"><failure/></testcase>'
        '<testcase classname="tests.decode.test_nvdec" name="test_c"><skipped/></testcase>'
        '<testcase classname="tests.decode.test_nvdec" name="test_d"/>'
        "</testsuite></testsuites>"
    )
    summary = gpu_summary.build(out, "gpu", steps, junit)
    assert summary["ok"] is False
    tests = summary["tests"]
    assert (tests["passed"], tests["failed"], tests["errors"], tests["skipped"]) == (2, 1, 0, 1)
    assert tests["failing"] == ["tests.decode.test_nvdec::test_b"]
    large = summary["sizes"]["large"]
    assert large["status"] == "deadline"
    assert large["figures"]["accuracy_max_abs"] == {"h264": 3}
    assert large["figures"]["nvdec_frames_per_s"] == {"all_threads": 3293}
    assert "nvdec_loader_vs_limit" not in large["figures"]  # no loader path ran
    text = gpu_summary.render(summary)
    assert "NOT OK" in text and "size large: deadline" in text and "test_b" in text


def test_the_summary_shows_the_decode_path_profile_without_counting_it(tmp_path, monkeypatch):
    """Step 3b (profile_loader.py --decode-device) is reported, and a failed profile does
    not make a run NOT OK (it is informational)."""
    out, steps = _summary_inputs(tmp_path, monkeypatch)
    records = [
        {"step": "size", "rc": 0, "seconds": 90, "limit": 170, "status": "ok", "size": "small"},
        {"step": "profile", "rc": 0, "seconds": 40, "limit": 60, "status": "ok"},
    ]
    _write_steps(steps, records)
    figures = {
        "decode_device": "cuda",
        "batch_size": 32,
        "wall_ms_per_batch": 12.5,
        "thread_ms_per_batch": {"build_mp4": 1.25, "decoder_create": 6.0, "decode": 20.0},
        "ms_per_call": {"build_mp4": 0.3, "decoder_create": 1.5, "decode": 5.0},
        "decoders_created_per_1000_batches": 4000.0,
    }
    doc = {"results": {"small-h264": figures}}
    (out / "results_profile_device.json").write_text(json.dumps(doc))
    summary = gpu_summary.build(out, "gpu", steps, None)
    assert summary["ok"] is True and summary["profile"]["figures"] == figures
    text = gpu_summary.render(summary)
    assert "decode path per call (profile): ok" in text
    assert "build_mp4 1.2, decoder_create 6, decode 20" in text
    assert "decoders created per 1,000 batches: 4,000" in text
    (out / "results_profile_device.json").unlink()  # a profile that left nothing
    records[1]["status"] = "failed"
    _write_steps(steps, records)
    summary = gpu_summary.build(out, "gpu", steps, None)
    assert summary["ok"] is True and summary["profile"]["figures"] == {}
    assert "decode path per call (profile): failed" in gpu_summary.render(summary)
