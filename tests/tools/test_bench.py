"""The benchmark harness end to end at tiny sizes, so it cannot rot.

No timing assertions: the speed targets are checked by running benchmarks/run.py (see
benchmarks/RESULTS.md). These tests only check that every script runs and writes what it
promises, and that the decode limit replays exactly the frames the reader decodes.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from benchmarks import bench_data, bench_ttfb, run
from benchmarks.bench_data import DatasetSpec, fast_render_frame
from jaxload.tools.bench.lerobot import lerobot_available
from tests.support.lerobot_factory import render_frame
from tests.tools.conftest import tiny_small

pytestmark = pytest.mark.integration

TINY = {
    "small": tiny_small(),
    "large": DatasetSpec("large", height=480, width=640, episodes=2, min_length=10, max_length=12),
}
TINY_TTFB = dataclasses.replace(bench_ttfb.SPEC, episodes=6, max_length=20)
FAST = ["--workers", "1", "--batch-size", "4"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def tiny(monkeypatch):
    """Every script's --quick datasets become tiny ones."""
    monkeypatch.setattr(bench_data, "QUICK", TINY)
    monkeypatch.setattr(bench_ttfb, "QUICK_SPEC", TINY_TTFB)


@pytest.mark.parametrize("size", [(96, 128), (480, 640), (48, 64)])
def test_fast_frames_are_the_factorys_frames(size):
    for camera in range(2):
        for episode, frame in [(0, 0), (3, 17), (11, 300)]:
            expected = render_frame(*size, episode, frame, camera)
            assert np.array_equal(fast_render_frame(*size, episode, frame, camera), expected)


def test_episode_lengths_are_seeded_and_span_the_range():
    spec = DatasetSpec("x", height=96, width=128, episodes=12)
    lengths = spec.episode_lengths()
    assert lengths == spec.episode_lengths()
    assert min(lengths) == 10 and max(lengths) == 600
    assert spec.dirname != dataclasses.replace(spec, seed=1).dirname


@pytest.mark.processes
def test_run_py_end_to_end(tiny, cache, tmp_path):
    """benchmarks/run.py --quick: both resolutions, table, JSON, PNG (LeRobot if installed)."""
    out = tmp_path / "results"
    argv = ["--quick", "--cache", str(cache), "--out", str(out), *FAST]
    argv += ["--seconds", "1", "--warmup", "0"]
    if not lerobot_available():
        argv.append("--no-lerobot")
    assert run.main(argv) == 0
    doc = json.loads((out / "results.json").read_text())
    assert [b["label"] for b in doc["benchmarks"]] == ["small", "large"]
    for b in doc["benchmarks"]:
        assert b["jaxload"]["samples_per_s"] > 0 and b["jaxload"]["peak_rss_bytes"] > 0
        assert b["jaxload"]["time_to_first_batch_s"] > 0
        assert b["decode_limit"]["samples_per_s"] > 0
        assert b["ratios"]["jaxload/decode_limit"] > 0
        # jaxload with the worker/thread counts it picks for this machine, measured besides
        defaults = b["jaxload_defaults"]
        assert defaults["samples_per_s"] > 0 and b["ratios"]["jaxload_defaults/decode_limit"] > 0
        assert defaults["details"]["loader_kwargs"]["read_threads"] >= 2
    assert set(doc["datasets"]) == {"small", "large"}
    assert (out / "results.png").read_bytes().startswith(PNG_MAGIC)
    if not lerobot_available():
        pytest.skip(
            "LeRobot reference not run: lerobot is not importable (scripts/install_lerobot.sh)"
        )
    for b in doc["benchmarks"]:
        assert b["lerobot"]["samples_per_s"] > 0 and b["ratios"]["jaxload/lerobot"] > 0
        assert b["lerobot"]["details"]["frames_per_sample"] == 3
    metrics = {"vs_lerobot", "vs_decode_limit"}
    assert {c["metric"] for c in doc["targets"]} == metrics | {f"defaults_{m}" for m in metrics}


@pytest.mark.processes
def test_cli_bench(small, tmp_path):
    from jaxload.cli import main

    _, path = small
    argv = ["bench", str(path), *FAST, "--seconds", "1", "--warmup", "0", "--in-process"]
    argv += ["--json", str(tmp_path / "b.json"), "--png", str(tmp_path / "b.png")]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["benchmarks"][0]["jaxload"]["samples_per_s"] > 0
    assert doc["benchmarks"][0]["lerobot"] is None
    assert (tmp_path / "b.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.processes
def test_side_scripts(tiny, cache, tmp_path):
    """bench_bytes, bench_memory, bench_ttfb, bench_gop and profile_loader at tiny sizes."""
    from benchmarks import bench_bytes, bench_gop, bench_memory, profile_loader

    common = ["--quick", "--cache", str(cache)]
    assert bench_bytes.main([*common, "--out", str(tmp_path / "bytes.json")]) == 0
    doc = json.loads((tmp_path / "bytes.json").read_text())
    assert doc["results"]["small"]["groups"]["long"]["mean_bytes"] > 0

    argv = [*common, "--out", str(tmp_path / "mem.json"), *FAST, "--epochs", "2"]
    assert bench_memory.main(argv) == 0
    doc = json.loads((tmp_path / "mem.json").read_text())
    assert [e["epoch"] for e in doc["epochs"]] == [1, 2] and doc["epochs"][0]["peak_rss_bytes"] > 0

    argv = [*common, "--out", str(tmp_path / "ttfb.json"), "--workers", "1", "0", "--repeats", "1"]
    assert bench_ttfb.main([*argv, "--batch-size", "4"]) == 0
    doc = json.loads((tmp_path / "ttfb.json").read_text())
    rows = [(r["num_workers"], r["imports_paid_before"]) for r in doc["results"]]
    assert rows == [(1, False), (0, False), (0, True)]  # then the loader's own start-up
    assert all(r["total_s"] > 0 for r in doc["results"]) and doc["worker_import_seconds"]

    argv = [*common, "--out", str(tmp_path / "gop.json"), "--gops", "1", "4"]
    argv += ["--batches", "2", "--singles", "4", "--batch-size", "4", "--workers", "1"]
    assert bench_gop.main(argv) == 0
    rows = json.loads((tmp_path / "gop.json").read_text())["rows"]
    expected = [("h264", t, g) for t in ("fastdecode", "none") for g in (1, 4)]
    assert [(r["codec"], r["tune"], r["gop"]) for r in rows] == [
        *expected,
        *[("hevc", "none", g) for g in (1, 4)],
    ]
    assert all(r["size_ratio"] > 0 and r["ms_per_sample_batched"] > 0 for r in rows)

    argv = [*common, "--only", "small", "--out", str(tmp_path / "prof.json"), *FAST]
    assert profile_loader.main([*argv, "--batches", "2", "--seconds", "1"]) == 0
    stages = json.loads((tmp_path / "prof.json").read_text())["results"]["small"]["stages"]
    assert stages["ms_per_batch"]["decode"] > 0 and stages["total_ms_per_batch"] > 0
    # The devices' decode path, on CPU devices (the GPU run is scripts/gpu_check.sh's host).
    argv += ["--batches", "2", "--decode-device", "device"]
    assert profile_loader.main(argv) == 0
    device = json.loads((tmp_path / "prof.json").read_text())["results"]["small"]
    assert device["decode_device"] == "device" and device["wall_ms_per_batch"] > 0
    assert device["thread_ms_per_batch"]["decode"] > 0
    assert device["decoders_created_per_1000_batches"] >= 1000  # one or more per batch


def test_bench_decoders(tiny, cache, tmp_path):
    """bench_decoders at tiny sizes: the loader's decode against the in-order ceiling."""
    from benchmarks import bench_decoders

    out = tmp_path / "decoders.json"
    argv = ["--quick", "--cache", str(cache), "--out", str(out), "--batches", "3"]
    assert bench_decoders.main([*argv, "--rounds", "2"]) == 0
    for got in json.loads(out.read_text())["results"].values():
        # Both cameras of a tiny dataset share a size: one mp4 and one decoder per batch.
        assert got["decoders_per_1000_batches"] == 1000
        # A frame asked for by several slots is decoded once and counted once.
        assert 0 < got["distinct_frames_per_round"] < got["frames_served_per_round"]
        assert got["ceiling_frames_per_round"] >= got["distinct_frames_per_round"]
        assert got["share_of_ceiling"] > 0 and len(got["seconds"]["loader"]) == 2


def test_report_fills_empty_and_stale_tables(monkeypatch):
    from benchmarks import report

    monkeypatch.setattr(report, "TABLES", {"t": ("x.json", lambda doc: f"| {doc['v']} |")})
    monkeypatch.setattr(report, "_load", lambda name: {"v": 7})
    text = "intro\n<!-- table:t -->\n<!-- /table:t -->\nmiddle\n"
    filled = report.refresh(text)
    assert filled == "intro\n<!-- table:t -->\n| 7 |\n<!-- /table:t -->\nmiddle\n"
    stale = filled.replace("| 7 |", "| old |\n| rows |")
    assert report.refresh(stale) == filled  # prose around the markers is kept
