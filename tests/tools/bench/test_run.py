"""One benchmark (jaxload.tools.bench.run): rounds summarised by their medians (peak memory
the largest), and run_bench measuring jaxload round after round on a real dataset."""

import pytest

from jaxload.tools.bench.measure import Throughput
from jaxload.tools.bench.run import median_throughput, run_bench


def _run(rate, ttfb, rss, load, **details) -> Throughput:
    return Throughput(name="jaxload", samples_per_s=rate, frames_per_s=3 * rate, samples=100,
                      seconds=10.0, batch_size=32, num_workers=2, time_to_first_batch_s=ttfb,
                      peak_rss_bytes=rss, details={"loadavg_before": load, **details})  # fmt: skip


def test_one_round_is_its_own_summary():
    only = _run(10.0, 1.0, 5, [0.1])
    assert median_throughput([only]) is only


def test_rounds_give_medians_totals_and_the_largest_peak():
    runs = [_run(10.0, 3.0, 700, [1.0], loader_kwargs={"read_threads": 2}),
            _run(30.0, None, None, [2.0]), _run(20.0, 1.0, 500, [3.0])]  # fmt: skip
    summary = median_throughput(runs)
    assert summary.samples_per_s == 20.0 and summary.frames_per_s == 60.0
    assert summary.time_to_first_batch_s == 2.0  # the median of the rounds that measured it
    assert summary.peak_rss_bytes == 700 and summary.samples == 300 and summary.seconds == 30.0
    assert summary.details["loader_kwargs"] == {"read_threads": 2}  # the first round's details
    assert summary.details["rounds"] == [
        {"samples_per_s": 10.0, "time_to_first_batch_s": 3.0, "peak_rss_bytes": 700,
         "loadavg_before": [1.0]},
        {"samples_per_s": 30.0, "time_to_first_batch_s": None, "peak_rss_bytes": None,
         "loadavg_before": [2.0]},
        {"samples_per_s": 20.0, "time_to_first_batch_s": 1.0, "peak_rss_bytes": 500,
         "loadavg_before": [3.0]},
    ]  # fmt: skip
    assert runs[0].details.keys() == {"loadavg_before", "loader_kwargs"}  # left as they were
    unmeasured = median_throughput([_run(1.0, None, None, None), _run(3.0, None, None, None)])
    assert unmeasured.time_to_first_batch_s is None and unmeasured.peak_rss_bytes is None


@pytest.mark.integration
def test_run_bench_measures_round_after_round_in_this_process(small):
    _, path = small
    said = []
    report = run_bench(path, num_workers=0, batch_size=4, seconds=0.3, warmup_s=0.0,
                       repeats=2, isolate=False, with_decode_limit=False, label="tiny",
                       log=said.append)  # fmt: skip
    assert said == [
        "[tiny] jaxload loader (0 workers, batch 4), round 1",
        "[tiny] jaxload loader (0 workers, batch 4), round 2",
    ]
    rounds = report.jaxload.details["rounds"]
    assert len(rounds) == 2 and all(r["samples_per_s"] > 0 for r in rounds)
    assert all(len(r["loadavg_before"]) == 3 for r in rounds)
    assert report.jaxload.seconds >= 2 * 0.3 and report.jaxload.samples % 4 == 0  # 2 windows
    assert report.lerobot is report.decode_limit is report.jaxload_defaults is None
    assert (report.dataset, report.label, report.num_workers, report.batch_size) == (
        str(path),
        "tiny",
        0,
        4,
    )
    assert set(report.windows) >= {"action", "observation.state"} and "cpus" in report.machine
