"""Measuring a pipeline (jaxload.tools.bench.measure): the time to first batch includes
making the iterator, the warm-up drains what was buffered before the window counts, CPU
time of the process tree, and the peak resident memory sampled in a thread."""

import os
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from jaxload.tools.bench import measure as M


def _batches(made: list[float], size: int = 4):
    """An iterator of batches `{"index": ids}` whose making takes 50 ms, numbered from 0."""

    def make():
        time.sleep(0.05)
        made.append(time.perf_counter())
        return ({"index": np.arange(size) + size * i, "i": i} for i in range(10**6))

    return make


def test_the_window_counts_batches_after_the_warm_up_only():
    made, seen = [], []
    before = time.perf_counter()
    timing = M.measure_iterator(_batches(made), seconds=0.05, warmup_s=0.0, warmup_batches=5,
                                batch_len=lambda b: len(b["index"]),
                                on_batch=lambda b: seen.append(b["i"]))  # fmt: skip
    after = time.perf_counter()
    assert timing.ttfb_s >= 0.05  # making the iterator (opening, starting workers) counts
    assert timing.warmup_batches == 5 and seen[0] == 5  # batches 0..4 drained first
    assert seen == list(range(5, 5 + len(seen)))
    assert timing.samples == 4 * len(seen)
    assert timing.seconds >= 0.05 and timing.window[1] - timing.window[0] == timing.seconds
    assert made[0] < timing.window[0] < timing.window[1] <= after and before < made[0]
    assert timing.cpu_seconds >= 0 and 0 <= timing.cpu_main_seconds <= timing.cpu_seconds + 1e-6


def test_the_warm_up_lasts_at_least_its_seconds():
    made, seen = [], []
    timing = M.measure_iterator(_batches(made), seconds=0.0, warmup_s=0.05, warmup_batches=1,
                                batch_len=lambda b: len(b["index"]),
                                on_batch=lambda b: seen.append(b["i"]))  # fmt: skip
    assert timing.window[0] - made[0] >= 0.05 and timing.warmup_batches > 1
    assert seen == [] and timing.samples == 0  # a window of 0 s counts nothing


def test_throughput_rates_cpu_and_memory_from_a_timing():
    timing = M.Timing(ttfb_s=1.5, samples=200, seconds=4.0, warmup_batches=7, window=(1.0, 5.0),
                      cpu_seconds=2.0, cpu_main_seconds=0.5)  # fmt: skip
    sampler = M.RssSampler()
    sampler.timeline = [(0.0, 100), (1.0, 300), (2.0, 200)]
    t = M.throughput("mine", timing, per_sample=3, batch_size=32, num_workers=2, rss=sampler)
    assert (t.name, t.samples_per_s, t.frames_per_s, t.samples) == ("mine", 50.0, 150.0, 200)
    assert (t.seconds, t.batch_size, t.num_workers, t.warmup_batches) == (4.0, 32, 2, 7)
    assert t.time_to_first_batch_s == 1.5 and t.peak_rss_bytes == 300
    assert t.cpu_ms_per_sample == 10.0  # 2 s of CPU over 200 samples
    assert t.details["main_process_cpu_ms_per_sample"] == 2.5
    assert t.details["frames_per_sample"] == 3 and "cpus" in t.details["machine_after"]
    assert t.to_json()["samples_per_s"] == 50.0
    idle = M.Timing(1.0, samples=0, seconds=0.0, warmup_batches=1, window=(0.0, 0.0))
    none = M.throughput("idle", idle, per_sample=3, batch_size=32, num_workers=0, rss=None)
    assert none.samples_per_s == 0.0 and none.cpu_ms_per_sample is None
    assert none.peak_rss_bytes is None and none.details["main_process_cpu_ms_per_sample"] is None
    busy = M.Timing(1.0, samples=0, seconds=1.0, warmup_batches=1, window=(0.0, 1.0),
                    cpu_seconds=1.0, cpu_main_seconds=1.0)  # fmt: skip
    assert M.throughput("busy", busy, 3, 32, 0, None).cpu_ms_per_sample is None  # no samples


def test_cpu_time_of_the_tree_and_the_delta_of_two_snapshots():
    before = M.tree_cpu_seconds()
    assert os.getpid() in before
    deadline = time.process_time() + 0.1
    while time.process_time() < deadline:  # burn 100 ms of CPU
        pass
    after = M.tree_cpu_seconds()
    # /proc counts in clock ticks (10 ms): 207.03 - 206.99 came out as 0.0399999.
    assert after[os.getpid()] - before[os.getpid()] >= 0.07
    # new processes count from zero; a pid whose clock went back (reused) counts nothing
    assert M.cpu_delta({1: 1.0, 2: 5.0}, {1: 1.5, 2: 4.0, 3: 0.25}) == pytest.approx(0.75)


def _samples_after(rss: M.RssSampler, moment: float, count: int = 2) -> None:
    """Waits until the sampler took `count` samples after `moment` (not a fixed sleep: a
    busy machine may hold its thread back for longer than a few intervals)."""
    deadline = time.perf_counter() + 10
    while sum(t > moment for t, _ in list(rss.timeline)) < count:
        assert time.perf_counter() < deadline, "the sampler took no sample in 10 s"
        time.sleep(0.01)


def test_the_rss_sampler_sees_a_peak_that_is_gone_by_the_end():
    with M.RssSampler(interval_s=0.01) as rss:
        _samples_after(rss, 0.0)
        start = time.perf_counter()
        block = np.ones(96 * 2**20, np.uint8)  # touched: resident
        _samples_after(rss, time.perf_counter())
        end = time.perf_counter()
        del block
        _samples_after(rss, time.perf_counter())
        leaving = time.perf_counter()
    count = len(rss.timeline)
    time.sleep(0.03)
    assert len(rss.timeline) == count  # the thread stopped
    assert rss.timeline[-1][0] >= leaving  # and a last sample was taken on the way out
    times = [t for t, _ in rss.timeline]
    assert times == sorted(times) and len(times) >= 5
    first, last = rss.timeline[0][1], rss.timeline[-1][1]
    assert rss.peak_bytes >= first + 80 * 2**20 and rss.peak_bytes > last + 80 * 2**20
    assert rss.peak_between(start, end) == rss.peak_bytes
    assert rss.peak_between(0.0, times[0] - 1) == 0  # no sample there
    assert M.tree_rss(psutil.Process()) > 0


def test_machine_info_says_the_cores_and_the_load():
    info = M.machine_info()
    assert info["cpus"] == os.cpu_count() and len(info["loadavg"]) == 3
    assert all(x == round(x, 2) for x in info["loadavg"])
    if os.path.exists("/proc/pressure/cpu"):
        assert "avg10" in info["cpu_pressure_some"]


@pytest.mark.processes
def test_the_tree_counts_child_processes_memory_and_cpu():
    code = "import time\nblock = bytearray(64 * 2**20)\nprint(flush=True)\ntime.sleep(30)"
    me = psutil.Process()
    alone = M.tree_rss(me)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # its 64 MiB are allocated
        assert M.tree_rss(me) >= alone + 60 * 2**20
        assert child.pid in M.tree_cpu_seconds()
    finally:
        child.kill()
        child.wait()
