"""A benchmark's report (jaxload.tools.bench.report): the ratios it states, its table, its
JSON read back as it was written, and its chart."""

import dataclasses
import json

import numpy as np
import pytest

from jaxload.tools.bench.limit import DecodeLimit
from jaxload.tools.bench.measure import Throughput
from jaxload.tools.bench.report import BenchReport, format_table, plot, read_json, write_json

WINDOWS = {"action": [0.0, 0.1], "observation.images.top": [-0.1, 0.0]}


def _throughput(name: str, rate: float, **kw) -> Throughput:
    return Throughput(name=name, samples_per_s=rate, frames_per_s=2 * rate, samples=100,
                      seconds=10.0, batch_size=32, num_workers=2, **kw)  # fmt: skip


def _limit(rate: float) -> DecodeLimit:
    return DecodeLimit(samples_per_s=rate, frames_per_s=2 * rate, samples=64, calls=10,
                       frames_decoded=128, best="2 processes",
                       seconds_by_setup={"1 thread": 1.0, "2 processes": 0.5},
                       cpu_ms_per_sample=3.25)  # fmt: skip


def _report(**kw) -> BenchReport:
    jax = _throughput("jaxload", 100.0, time_to_first_batch_s=2.5, peak_rss_bytes=300 * 2**20,
                      cpu_ms_per_sample=4.0)  # fmt: skip
    return BenchReport(dataset="/data/pusht", windows=WINDOWS, num_workers=2, batch_size=32,
                       jaxload=jax, **kw)  # fmt: skip


def test_the_ratios_are_there_only_when_both_sides_were_measured():
    alone = _report()
    assert alone.vs_lerobot is alone.vs_decode_limit is None
    assert alone.defaults_vs_lerobot is alone.defaults_vs_decode_limit is None
    full = _report(lerobot=_throughput("lerobot", 50.0), decode_limit=_limit(400.0),
                   jaxload_defaults=_throughput("jaxload (defaults)", 150.0))  # fmt: skip
    assert full.vs_lerobot == 2.0 and full.vs_decode_limit == 0.25
    assert full.defaults_vs_lerobot == 3.0 and full.defaults_vs_decode_limit == 0.375
    stalled = _report(lerobot=_throughput("lerobot", 0.0), decode_limit=_limit(0.0))
    assert stalled.vs_lerobot is None and stalled.vs_decode_limit is None  # never a 1/0
    assert full.to_json()["ratios"] == {
        "jaxload/lerobot": 2.0, "jaxload/decode_limit": 0.25,
        "jaxload_defaults/lerobot": 3.0, "jaxload_defaults/decode_limit": 0.375,
    }  # fmt: skip


def test_the_table_has_a_line_per_pipeline_and_one_of_ratios():
    defaults = _throughput("jaxload (defaults)", 150.0,
                           details={"loader_kwargs": {"read_threads": 3}})  # fmt: skip
    full = _report(lerobot=_throughput("lerobot", 50.0), decode_limit=_limit(400.0),
                   jaxload_defaults=defaults, label="pusht")  # fmt: skip
    unlabelled = dataclasses.replace(_report(), dataset="/data/aloha")
    lines = format_table([full, unlabelled]).splitlines()
    assert lines[0].split() == ["dataset", "pipeline", "samples/s", "frames/s", "CPU",
                                "ms/sample", "1st", "batch", "s", "peak", "RSS", "MB"]  # fmt: skip
    assert set(lines[1]) == {"-"} and len(lines[1]) == len(lines[0])
    assert lines[2].split() == ["pusht", "jaxload", "(2", "workers)", "100.0", "200.0", "4.00",
                                "2.50", "300"]  # fmt: skip
    assert lines[3].split()[:5] == ["pusht", "jaxload", "(2", "w.,", "3"]
    assert lines[3].split()[-5:] == ["150.0", "300.0", "-", "-", "-"]  # not measured: "-"
    assert lines[4].split()[:3] == ["pusht", "LeRobot+DataLoader", "(2"]
    assert lines[5].split() == ["pusht", "decode", "limit", "(2", "processes)", "400.0",
                                "800.0", "3.25"]  # fmt: skip
    assert lines[6] == (
        "pusht    jaxload (2 workers): 2.00x LeRobot, 25% of the decode limit, "
        "its defaults 3.00x LeRobot, 38% of the limit"
    )
    # the unlabelled report: named after its folder, jaxload alone, no ratios
    assert lines[7].split()[:4] == ["aloha", "jaxload", "(2", "workers)"] and len(lines) == 8


def test_json_reads_back_what_was_written(tmp_path):
    details = {"loader_kwargs": {"read_threads": 2}, "load": np.float64(1.5),
               "rounds": np.array([1, 2])}  # fmt: skip
    full = _report(lerobot=_throughput("lerobot", 50.0), decode_limit=_limit(400.0),
                   jaxload_defaults=_throughput("d", 150.0, details=details),
                   lerobot_source="/src/pusht", label="pusht", machine={"cpus": 2})  # fmt: skip
    path = tmp_path / "new" / "folder" / "bench.json"
    write_json([full, _report()], path, targets=[{"metric": "vs_lerobot"}])
    doc = json.loads(path.read_text())
    assert doc["targets"] == [{"metric": "vs_lerobot"}] and len(doc["benchmarks"]) == 2
    assert doc["benchmarks"][0]["jaxload_defaults"]["details"]["rounds"] == [1, 2]
    back, alone = read_json(path)
    assert back.jaxload_defaults.details["load"] == 1.5
    back.jaxload_defaults.details["rounds"] = details["rounds"] = [1, 2]
    assert back == full and alone == _report()
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        write_json([_report()], tmp_path / "bad.json", extra=object())


def test_the_chart_is_a_png(tmp_path):
    full = _report(lerobot=_throughput("lerobot", 50.0), decode_limit=_limit(400.0))
    path = tmp_path / "charts" / "bench.png"
    plot([full, _report(label="alone")], path)
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > image.size[1] > 100
