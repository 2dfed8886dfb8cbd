"""jaxload bench PATH: loader throughput, its decode limit, optionally LeRobotDataset beside it.

Examples:
    jaxload bench out/my_dataset
    jaxload bench out/my_dataset --lerobot-source path/to/lerobot_dataset --workers 2 \\
        --batch-size 32 --seconds 20 --json bench.json --png bench.png
"""

import argparse
import json

NAME = "bench"
HELP = "throughput of jaxload's loader, optionally side by side with LeRobotDataset on the source"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="jaxload dataset directory")
    parser.add_argument(
        "--lerobot-source",
        help="the LeRobot dataset PATH was converted from: also measure LeRobotDataset + "
        "DataLoader on it (needs lerobot: bash scripts/install_lerobot.sh)",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per batch (default 32)")
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="steady-state measurement (default 20)"
    )
    parser.add_argument("--warmup", type=float, default=5.0, help="warm-up seconds (default 5)")
    parser.add_argument(
        "--windows",
        help="delta_timestamps as JSON, e.g. '{\"action\": [0, 0.033]}' (default: a 16-step "
        "action chunk, 2 past states, 2 frames of the first camera, 1 of the others)",
    )
    parser.add_argument("--no-decode-limit", action="store_true", help="skip the decode limit")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="measure in this process (default: a fresh one each)",
    )
    parser.add_argument("--json", help="write the results as JSON to this file")
    parser.add_argument("--png", help="write a bar chart to this file")


def run(args: argparse.Namespace) -> int:
    from jaxload.tools import bench

    if args.lerobot_source is not None:
        from jaxload.tools.bench.lerobot import INSTALL_HINT, lerobot_available

        if not lerobot_available():
            print(f"jaxload bench: {INSTALL_HINT}")
            return 1
    report = bench.run_bench(
        args.path,
        lerobot_source=args.lerobot_source,
        num_workers=args.workers,
        batch_size=args.batch_size,
        seconds=args.seconds,
        warmup_s=args.warmup,
        delta_timestamps=json.loads(args.windows) if args.windows else None,
        with_decode_limit=not args.no_decode_limit,
        isolate=not args.in_process,
    )
    print(bench.format_table([report]))
    if args.json:
        bench.write_json([report], args.json)
    if args.png:
        bench.plot([report], args.png)
    return 0
