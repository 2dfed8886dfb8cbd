"""converters/progress.py: the bar counts this run's frames, episodes and input bytes on
top of what earlier runs finished; the summary says what was written, how fast, the work's
balance, each camera's fidelity (exact, or PSNR and a chosen crf) and the upload."""

from __future__ import annotations

import io
import math

from jaxload.converters import progress
from jaxload.converters.progress import ConvertReport, ProgressBar


def test_the_bar_adds_this_runs_work_to_what_earlier_runs_did(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", stream)
    bar = ProgressBar(total_frames=100, total_episodes=10, done_frames=40, done_episodes=4,
                      enabled=True)  # fmt: skip
    bar.unit_done(frames=20, episodes=2, input_bytes=2**20)
    bar.close()
    assert (bar.frames, bar.episodes, bar.input_bytes) == (20, 6, 2**20)
    last = stream.getvalue().replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("convert:  60%|") and "60/100 frames, 6/10 episodes, " in last
    assert " MiB/s in [" in last


def _report(**kw):
    fields = dict(out="out/ds", episodes=4, frames=200, seconds=2.0, source_bytes=2**21,
                  output_bytes=2**22, psnr={})  # fmt: skip
    return ConvertReport(**{**fields, **kw})


def test_the_summary_says_rates_work_fidelity_and_upload():
    report = _report(
        source="hf://datasets/a/b@main (v3.0)",
        units=3, workers=2, engine="local", resumed_units=1, retries=2,
        balance_lpt=1.05, balance_round_robin=1.5,
        psnr={"top": (math.inf, math.inf), "wrist": (38.123, 41.0)}, camera_crf={"wrist": 22},
        upload="upload: 9 objects",
    )  # fmt: skip
    assert report.summary().splitlines() == [
        "wrote out/ds: 4 episodes, 200 frames in 2.0 s (100 frames/s, 2.00 episodes/s)",
        "input: 2.00 MiB (1.00 MiB/s) from hf://datasets/a/b@main (v3.0)",
        "output: 4.00 MiB; output is 2.00x the source",
        "work: 3 units on 2 local worker(s), cost balance max/mean 1.05 (round-robin would "
        "be 1.50), 1 units resumed, 2 transient errors retried",
        "fidelity top: exact (every frame identical to the source)",
        "fidelity wrist: PSNR min 38.12 dB, mean 41.00 dB (crf 22, chosen for the fidelity target)",
        "upload: 9 objects",
    ]


def test_an_earlier_runs_conversion_has_no_rates():
    text = _report(earlier=True, seconds=0.25, upload="upload had completed").summary()
    assert text.splitlines() == [
        "wrote out/ds: 4 episodes, 200 frames, converted by an earlier run of this command "
        "(this run finished in 0.2 s)",
        "output: 4.00 MiB",
        "upload had completed",
    ]


def test_rates_and_realized_balance():
    report = _report(worker_seconds={"a": 3.0, "b": 1.0})
    assert report.input_mb_per_s == 1.0 and report.episodes_per_s == 2.0
    assert report.realized_balance == 1.5
    assert _report().realized_balance == 1.0
    assert _report(worker_seconds={"a": 0.0}).realized_balance == 1.0
