"""One benchmark's results (`BenchReport`: jaxload, its decode limit, LeRobot, for one
dataset) and their outputs: a plain-text table, a JSON document and a bar chart.

Example:
    >>> report = run_bench("out/ds", lerobot_source="lerobot/ds")
    >>> print(format_table([report]))
    >>> write_json([report], "bench.json")
    >>> plot(read_json("bench.json"), "bench.png")
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxload.tools.bench.limit import DecodeLimit
from jaxload.tools.bench.measure import Throughput
from jaxload.tools.bench.windows import Windows


@dataclasses.dataclass
class BenchReport:
    """Results for one dataset, all with the same windows, batch size and worker count."""

    dataset: str
    windows: Windows
    num_workers: int
    batch_size: int
    jaxload: Throughput
    decode_limit: DecodeLimit | None = None
    lerobot: Throughput | None = None
    lerobot_source: str | None = None
    label: str = ""
    machine: dict[str, Any] = dataclasses.field(default_factory=dict)
    # jaxload with the worker/thread counts it picks itself (split_cores), when measured
    jaxload_defaults: Throughput | None = None

    @property
    def vs_lerobot(self) -> float | None:
        """jaxload samples/s divided by LeRobotDataset + DataLoader samples/s."""
        if self.lerobot is None or self.lerobot.samples_per_s <= 0:
            return None
        return self.jaxload.samples_per_s / self.lerobot.samples_per_s

    @property
    def vs_decode_limit(self) -> float | None:
        """jaxload samples/s as a share of the decode limit."""
        if self.decode_limit is None or self.decode_limit.samples_per_s <= 0:
            return None
        return self.jaxload.samples_per_s / self.decode_limit.samples_per_s

    @property
    def defaults_vs_lerobot(self) -> float | None:
        """The same ratio for jaxload with its own worker/thread counts."""
        if self.jaxload_defaults is None or self.lerobot is None or self.lerobot.samples_per_s <= 0:
            return None
        return self.jaxload_defaults.samples_per_s / self.lerobot.samples_per_s

    @property
    def defaults_vs_decode_limit(self) -> float | None:
        if self.jaxload_defaults is None or self.decode_limit is None:
            return None
        return self.jaxload_defaults.samples_per_s / max(self.decode_limit.samples_per_s, 1e-9)

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "dataset": self.dataset,
            "lerobot_source": self.lerobot_source,
            "windows": self.windows,
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
            "jaxload": self.jaxload.to_json(),
            "jaxload_defaults": self.jaxload_defaults.to_json() if self.jaxload_defaults else None,
            "lerobot": self.lerobot.to_json() if self.lerobot else None,
            "decode_limit": self.decode_limit.to_json() if self.decode_limit else None,
            "ratios": {
                "jaxload/lerobot": self.vs_lerobot,
                "jaxload/decode_limit": self.vs_decode_limit,
                "jaxload_defaults/lerobot": self.defaults_vs_lerobot,
                "jaxload_defaults/decode_limit": self.defaults_vs_decode_limit,
            },
            "machine": self.machine,
        }


# --- output ----------------------------------------------------------------------------------


def format_table(reports: Sequence[BenchReport]) -> str:
    """A plain-text table: samples/s, frames/s, CPU per sample, start-up, memory, ratios."""
    header = (
        f"{'dataset':<8} {'pipeline':<26} {'samples/s':>9} {'frames/s':>9} "
        f"{'CPU ms/sample':>13} {'1st batch s':>11} {'peak RSS MB':>11}"
    )
    lines = [header, "-" * len(header)]
    for r in reports:
        name = r.label or Path(r.dataset).name
        rows = [(f"jaxload ({r.num_workers} workers)", r.jaxload)]
        if r.jaxload_defaults is not None:
            rows.append((f"jaxload ({_parallelism(r.jaxload_defaults)})", r.jaxload_defaults))
        if r.lerobot is not None:
            rows.append((f"LeRobot+DataLoader ({r.num_workers} w.)", r.lerobot))
        for title, t in rows:
            lines.append(
                f"{name:<8} {title:<26} {t.samples_per_s:>9.1f} {t.frames_per_s:>9.1f} "
                f"{_fmt(t.cpu_ms_per_sample, '.2f'):>13} "
                f"{_fmt(t.time_to_first_batch_s, '.2f'):>11} "
                f"{_fmt(_mb(t.peak_rss_bytes), '.0f'):>11}"
            )
        if r.decode_limit is not None:
            d = r.decode_limit
            lines.append(
                f"{name:<8} {'decode limit (' + d.best + ')':<26} {d.samples_per_s:>9.1f} "
                f"{d.frames_per_s:>9.1f} {d.cpu_ms_per_sample:>13.2f}"
            )
        ratios = _ratio_notes(r)
        if ratios:
            lines.append(f"{name:<8} jaxload ({r.num_workers} workers): {', '.join(ratios)}")
    return "\n".join(lines)


def _ratio_notes(r: BenchReport) -> list[str]:
    """The ratios measured for one dataset, as short phrases (table and chart)."""
    notes = []
    if r.vs_lerobot is not None:
        notes.append(f"{r.vs_lerobot:.2f}x LeRobot")
    if r.vs_decode_limit is not None:
        notes.append(f"{100 * r.vs_decode_limit:.0f}% of the decode limit")
    if r.defaults_vs_lerobot is not None:
        notes.append(f"its defaults {r.defaults_vs_lerobot:.2f}x LeRobot")
    if r.defaults_vs_decode_limit is not None:
        notes.append(f"{100 * r.defaults_vs_decode_limit:.0f}% of the limit")
    return notes


def _parallelism(t: Throughput) -> str:
    """ "W w., T thr.": the worker processes and read threads a jaxload run used."""
    threads = t.details.get("loader_kwargs", {}).get("read_threads", "?")
    return f"{t.num_workers} w., {threads} thr."


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _mb(n: int | None) -> float | None:
    return None if n is None else n / 2**20


def write_json(reports: Sequence[BenchReport], path: str | os.PathLike, **extra: Any) -> None:
    """The reports (and any extra sections) as one JSON document."""
    doc = {"benchmarks": [r.to_json() for r in reports], **extra}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=2, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> list[BenchReport]:
    """The reports in a file written by `write_json` (e.g. to plot them again)."""
    doc = json.loads(Path(path).read_text())
    reports = []
    for b in doc["benchmarks"]:
        limit = dict(b["decode_limit"]) if b["decode_limit"] else None
        reports.append(
            BenchReport(
                dataset=b["dataset"],
                windows=b["windows"],
                num_workers=b["num_workers"],
                batch_size=b["batch_size"],
                jaxload=Throughput(**b["jaxload"]),
                decode_limit=DecodeLimit(**limit) if limit else None,
                lerobot=Throughput(**b["lerobot"]) if b["lerobot"] else None,
                jaxload_defaults=(
                    Throughput(**b["jaxload_defaults"]) if b.get("jaxload_defaults") else None
                ),
                lerobot_source=b["lerobot_source"],
                label=b["label"],
                machine=b["machine"],
            )
        )
    return reports


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def plot(reports: Sequence[BenchReport], path: str | os.PathLike) -> None:
    """Bar chart PNG: samples/s of jaxload, LeRobot and the decode limit, one panel per
    dataset (each with its own scale), ratios under each panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(reports), figsize=(1.5 + 3.8 * len(reports), 4.4), dpi=110)
    axes = np.atleast_1d(axes)
    w, b = reports[0].num_workers, reports[0].batch_size
    for ax, report in zip(axes, reports):
        bars = _bars(report)
        drawn = ax.bar(
            [t for t, _, _ in bars], [v for _, v, _ in bars], color=[c for *_, c in bars]
        )
        for bar, (_, v, _) in zip(drawn, bars):
            ax.annotate(
                f"{v:.0f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        extra = _ratio_notes(report)
        ax.set_title(report.label or Path(report.dataset).name, fontsize=10)
        ax.set_xlabel(f"jaxload ({w} workers): " + ", ".join(extra) if extra else "", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.margins(y=0.15)
    axes[0].set_ylabel("samples / s (steady state)")
    fig.suptitle(f"Training samples per second: batch {b}, same windows", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _bars(report: BenchReport) -> list[tuple[str, float, str]]:
    """(label, samples/s, colour) of each pipeline measured for one dataset."""
    w = report.num_workers
    bars = [(f"jaxload\n{w} workers", report.jaxload.samples_per_s, "#1f77b4")]
    if report.jaxload_defaults is not None:
        d = report.jaxload_defaults
        bars.append((f"jaxload\n{_parallelism(d)}", d.samples_per_s, "#aec7e8"))
    if report.lerobot is not None:
        bars.append((f"LeRobot\n{w} workers", report.lerobot.samples_per_s, "#ff7f0e"))
    if report.decode_limit is not None:
        bars.append(("decode\nlimit", report.decode_limit.samples_per_s, "#7f7f7f"))
    return bars
