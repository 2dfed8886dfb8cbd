"""The benchmark: jaxload vs LeRobotDataset + DataLoader vs the decode limit, two resolutions.

    python benchmarks/run.py            # full run: writes benchmarks/results.{json,png}
    python benchmarks/run.py --all      # that, then every side benchmark, then RESULTS.md
    python benchmarks/run.py --quick    # a few minutes' sanity run into runs/bench/quick/

Generates (once; cached under --cache, default runs/bench/) a small (96x128) and a large
(480x640) LeRobot v3.0 dataset with 2 AV1 cameras and episode lengths drawn from 10..600
frames, converts each with the default converter settings, then measures on each, with the
same windows, batch size and worker count: jaxload's loader, LeRobotDataset in a torch
DataLoader (as openpi uses it) on the LeRobot source, and the decode limit. Prints a table
with the ratios and checks them against the targets.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import bench_data  # noqa: E402
from benchmarks.bench_data import DatasetSpec, specs_for  # noqa: E402

# What the issue asks for: jaxload / LeRobot samples/s, and share of the decode limit.
TARGETS = {"small": {"vs_lerobot": 5.0}, "large": {"vs_lerobot": 1.5, "vs_decode_limit": 0.85}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny datasets, short runs")
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, help="results directory (default benchmarks/)")
    parser.add_argument("--only", choices=["small", "large"], action="append")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seconds", type=float, help="steady-state seconds (default 20)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds (default 5)")
    parser.add_argument("--repeats", type=int, help="alternating rounds (default 2)")
    parser.add_argument("--no-lerobot", action="store_true", help="skip LeRobotDataset")
    parser.add_argument(
        "--video-codec",
        help="convert with this --video-codec (default: the converter's default, exact "
        "frames: the AV1 sources copied); e.g. h264 for the re-encoded mode",
    )
    parser.add_argument(
        "--no-defaults",
        action="store_true",
        help="skip jaxload with its own worker/thread counts (measured besides --workers)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="then run bench_ttfb, bench_memory, bench_bytes, bench_gop and profile_loader "
        "(results_*.json beside results.json) and refresh the tables in RESULTS.md",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.seconds = args.seconds or (3.0 if quick else 20.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if quick else 5.0)
    args.repeats = args.repeats or (1 if quick else 2)
    args.out = args.out or (args.cache / "quick" if quick else REPO_ROOT / "benchmarks")
    return args


def check_targets(reports: list) -> list[dict]:
    """Each target of the issue with the measured value and whether it is met: for jaxload
    with the same worker count as LeRobot and, when measured, with its own defaults."""
    checks = []
    for report in reports:
        for name, target in TARGETS.get(report.label, {}).items():
            for metric in (name, f"defaults_{name}"):
                value = getattr(report, metric)
                if value is None and metric != name:
                    continue
                checks.append(
                    {
                        "dataset": report.label,
                        "metric": metric,
                        "target": target,
                        "value": value,
                        "met": value is not None and value >= target,
                    }
                )
    return checks


def format_checks(checks: list[dict]) -> str:
    lines = []
    for c in checks:
        value = "n/a" if c["value"] is None else f"{c['value']:.2f}"
        verdict = "met" if c["met"] else "NOT met"
        lines.append(f"target {c['dataset']} {c['metric']} >= {c['target']}: {value} ({verdict})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    from jaxload.tools import bench

    args = parse_args(argv)
    with_lerobot = not args.no_lerobot
    if with_lerobot:
        from jaxload.tools.bench.lerobot import INSTALL_HINT, lerobot_available

        if not lerobot_available():
            print(f"run.py: {INSTALL_HINT} (or pass --no-lerobot)", file=sys.stderr)
            return 1
    reports, datasets = [], {}
    started = datetime.datetime.now(datetime.UTC)
    for label, spec in specs_for(args.quick, args.only).items():
        codec = {"video_codec": args.video_codec} if args.video_codec else {}
        src, out = bench_data.prepare(spec, args.cache, workers=args.workers, **codec)
        datasets[label] = dataset_record(spec, src, out)
        report = bench.run_bench(
            out,
            lerobot_source=src if with_lerobot else None,
            num_workers=args.workers,
            batch_size=args.batch_size,
            seconds=args.seconds,
            warmup_s=args.warmup,
            repeats=args.repeats,
            label=label,
            with_defaults=not args.no_defaults,
        )
        reports.append(report)
        print(bench.format_table([report]), flush=True)
    checks = check_targets(reports)
    print()
    print(bench.format_table(reports))
    print(format_checks(checks))
    command = "python benchmarks/run.py " + " ".join(sys.argv[1:] if argv is None else argv)
    bench.write_json(
        reports,
        args.out / "results.json",
        command=command.strip(),
        started=started.isoformat(timespec="seconds"),
        machine=bench.machine_info(),
        datasets=datasets,
        targets=checks,
    )
    bench.plot(reports, args.out / "results.png")
    print(f"wrote {args.out / 'results.json'} and {args.out / 'results.png'}")
    return run_side_benchmarks(args) if args.all else 0


def run_side_benchmarks(args: argparse.Namespace) -> int:
    """Every other benchmark with the same cache (and --quick), results beside results.json."""
    from benchmarks import bench_bytes, bench_gop, bench_memory, bench_ttfb, profile_loader, report

    common = ["--cache", str(args.cache), *(["--quick"] if args.quick else [])]
    scripts = {
        "ttfb": bench_ttfb,
        "memory": bench_memory,
        "bytes": bench_bytes,
        "gop": bench_gop,
        "profile": profile_loader,
    }
    failed = 0
    for name, module in scripts.items():
        print(f"\n== {module.__name__} ==", flush=True)
        failed += module.main([*common, "--out", str(args.out / f"results_{name}.json")]) != 0
    if args.out.resolve() == (REPO_ROOT / "benchmarks").resolve():
        report.main()
    return failed


def dataset_record(spec: DatasetSpec, src: Path, out: Path) -> dict:
    """What a benchmark dataset is: its spec, lengths, sizes, generation and conversion."""
    import json

    lengths = spec.episode_lengths()
    report_path = out.parent / f"{out.name}.convert.json"
    return {
        "spec": dataclasses.asdict(spec),
        "lengths": bench_data.summarize_lengths(lengths),
        "source": str(src),
        "dataset": str(out),
        "source_bytes": bench_data.dataset_bytes(src),
        "dataset_bytes": bench_data.dataset_bytes(out),
        "generation_seconds": bench_data.generation_seconds(src),
        "conversion": json.loads(report_path.read_text()) if report_path.is_file() else None,
    }


if __name__ == "__main__":
    sys.exit(main())
