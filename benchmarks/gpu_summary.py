"""The figures of one `scripts/gpu_check.sh` run in one file: `summary.json` (and the same
as text, `summary.txt`) beside the run's other files in its OUT folder. Exit status 0 when
every step was ok.

    python benchmarks/gpu_summary.py --out OUT --mode gpu --steps steps.jsonl [--junit j.xml]

It reads what the script left: `steps.jsonl` (one line per step: install, tests, each size,
with its exit status, seconds, limit and status ok / deadline / failed), the pytest log or
JUnit XML, and `results_gpu_<size>.json` from benchmarks/bench_gpu.py (rewritten after
every stage, so a size cut by its deadline still has the stages it finished). Each size's
figures are `bench_gpu.summarize` of its results: accuracy, the NVDEC and CPU limits,
samples/s per loader path and the ratios #35 asks for.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.bench_gpu import summarize  # noqa: E402

PACKAGES = ("torch", "torchcodec", "jax", "jaxlib", "jax-cuda13-plugin", "av", "grain", "pytest")
RATIOS = ("nvdec_loader_vs_limit", "auto_vs_best")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the run's OUT folder")
    p.add_argument("--mode", choices=["gpu", "dry"], required=True)
    p.add_argument("--steps", type=Path, required=True, help="the script's steps.jsonl")
    p.add_argument("--junit", type=Path, default=None, help="pytest's JUnit XML (GPU runs)")
    p.add_argument("--seconds", type=float, default=None, help="the whole run's wall time")
    args = p.parse_args(argv)
    summary = build(args.out, args.mode, args.steps, args.junit, args.seconds)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = render(summary)
    (args.out / "summary.txt").write_text(text)
    print(text, end="")
    return 0 if summary["ok"] else 1


def build(out: Path, mode: str, steps: Path, junit: Path | None, seconds=None) -> dict:
    lines = steps.read_text().splitlines() if steps.is_file() else []
    records = [json.loads(line) for line in lines if line.strip()]
    summary: dict = {"mode": mode, "seconds": seconds, "machine": machine()}
    sizes: dict = {}
    for record in records:
        step = record.pop("step")
        if step == "size":
            name = record.pop("size")
            record["figures"] = size_figures(out / f"results_gpu_{name}.json", name)
            sizes[name] = record
        elif step == "tests":
            record.update(count_tests(out / "tests.log", junit))
            summary["tests"] = record
        elif step == "profile":  # informational: not part of `ok`
            record["figures"] = profile_figures(out / "results_profile_device.json")
            summary["profile"] = record
        else:
            summary[step] = record
    summary["sizes"] = sizes
    steps = [summary[k] for k in ("install", "tests") if k in summary] + list(sizes.values())
    summary["ok"] = bool(steps) and all(step["status"] == "ok" for step in steps)
    return summary


def machine() -> dict:
    gpus = []
    try:
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]  # fmt: skip
        listed = subprocess.run(query, capture_output=True, text=True, timeout=30)
        gpus = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        pass
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "gpus": gpus,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "versions": versions,
        "ffmpeg": os.environ.get("GPU_CHECK_FFMPEG", "the system's (torchcodec finds it)"),
    }


def size_figures(path: Path, name: str) -> dict:
    """bench_gpu.summarize of the size's results, as far as they went ({} if none)."""
    if not path.is_file():
        return {}
    try:
        results = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    for result in results:
        if result.get("size") == name:
            figures = summarize(result)
            figures["devices"] = result.get("devices")
            return figures
    return {}


def profile_figures(path: Path) -> dict:
    """The decode-path profile's figures (benchmarks/profile_loader.py --decode-device), or
    {} where the step left none."""
    try:
        results = json.loads(path.read_text())["results"]
    except (OSError, ValueError, KeyError):
        return {}
    return next(iter(results.values()), {})


def count_tests(log: Path, junit: Path | None) -> dict:
    """passed/failed/errors/skipped and the failing tests' ids (JUnit XML), or the number
    collected (a dry run's --collect-only log)."""
    if junit is not None and junit.is_file():
        suites = ET.parse(junit).getroot()
        suites = [suites] if suites.tag == "testsuite" else list(suites.iter("testsuite"))
        counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}  # fmt: skip
        failing = [
            f"{case.get('classname')}::{case.get('name')}"
            for case in (c for s in suites for c in s.iter("testcase"))
            if case.find("failure") is not None or case.find("error") is not None
        ]
        passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
        return {
            "passed": passed,
            "failed": counts["failures"],
            "errors": counts["errors"],
            "skipped": counts["skipped"],
            "failing": failing,
        }
    text = log.read_text(errors="replace") if log.is_file() else ""
    found = re.search(r"(\d+) tests? collected", text)
    return {"collected": int(found.group(1)) if found else 0}


def render(summary: dict) -> str:
    m = summary["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    lines = [
        f"gpu_check ({summary['mode']}): {'ok' if summary['ok'] else 'NOT OK'}"
        + (f" in {summary['seconds']:.0f} s" if summary.get("seconds") is not None else ""),
        f"machine: {'; '.join(m['gpus']) or 'no GPU'}; {m['cores']} cores; Python {m['python']}",
        f"versions: {versions}",
        f"FFmpeg: {m['ffmpeg']}",
    ]
    if summary["mode"] != "gpu":
        lines.append(
            "dry run, no GPU: CPU devices stand in for GPUs, so the NVDEC figures and the "
            "ratios below are the stand-in's (they say the steps run, nothing of a GPU)"
        )
    if "install" in summary:
        lines.append(f"install: {summary['install'].get('detail', '')}")
    tests = summary.get("tests")
    if tests:
        if "collected" in tests:
            counts = f"{tests['collected']} collected (not run: no GPU)"
        else:
            counts = ", ".join(f"{tests[k]} {k}" for k in ("passed", "failed", "errors", "skipped"))
        lines.append(f"tests: {tests['status']} ({counts}) in {tests['seconds']} s")
        lines += [f"  failing: {t}" for t in tests.get("failing", [])]
    for name, size in summary["sizes"].items():
        lines.append(
            f"size {name}: {size['status']} in {size['seconds']} s (deadline {size['limit']} s)"
        )
        f = size["figures"]
        if "accuracy_max_abs" in f:
            lines.append(f"  accuracy, max |device - CPU|: {_pairs(f['accuracy_max_abs'])}")
        if "nvdec_frames_per_s" in f:
            lines.append(f"  NVDEC limit frames/s: {_pairs(f['nvdec_frames_per_s'])}")
        if "cpu_limit_samples_per_s" in f:
            lines.append(f"  CPU-worker limit: {f['cpu_limit_samples_per_s']:,} samples/s")
        for key in ("samples_per_s", "wait_fraction", "first_batch_s"):
            if key in f:
                lines.append(f"  {key}: {_pairs(f[key])}")
        ratios = {k: round(f[k], 3) for k in RATIOS if k in f}
        if ratios:
            lines.append(f"  ratios: {_pairs(ratios)}")
    profile = summary.get("profile")
    if profile:
        lines.append(f"decode path per call (profile): {profile['status']}")
        f = profile.get("figures") or {}
        if f:
            per_batch = {k: round(v, 1) for k, v in f["thread_ms_per_batch"].items()}
            per_call = {k: round(v, 2) for k, v in f["ms_per_call"].items()}
            lines.append(
                f"  {f['decode_device']}: {f['wall_ms_per_batch']:.1f} ms per batch of "
                f"{f['batch_size']}; threads' ms per batch: {_pairs(per_batch)}"
            )
            lines.append(f"  ms per call: {_pairs(per_call)}")
            lines.append(
                f"  decoders created per 1,000 batches: {f['decoders_created_per_1000_batches']:,.0f}"
            )
    return "\n".join(lines) + "\n"


def _pairs(d: dict) -> str:
    return ", ".join(f"{k} {_value(v)}" for k, v in d.items())


def _value(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return f"{v:,}" if isinstance(v, int) else f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"


if __name__ == "__main__":
    raise SystemExit(main())
