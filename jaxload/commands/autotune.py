"""jaxload autotune PATH [PATH ...]: measure this machine and the dataset, recommend loader settings."""

import argparse
import json

NAME = "autotune"
HELP = "measure this machine and a dataset; print recommended make_loader settings"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="jaxload dataset(s); several = a mixture")
    parser.add_argument(
        "--delta-timestamps",
        type=json.loads,
        help="windows as JSON, e.g. '{\"action\": [0, 0.1, 0.2]}' (they change the cost)",
    )
    parser.add_argument(
        "--target-samples-per-s", type=float, help="what the trainer consumes; caps the workers"
    )
    parser.add_argument("--hosts", type=int, default=1, help="hosts that will train (batch bounds)")
    parser.add_argument("--json", action="store_true", help="print the recommendation as JSON")


def run(args: argparse.Namespace) -> int:
    from jaxload.autotune import recommend

    rec = recommend(
        args.paths,
        delta_timestamps=args.delta_timestamps,
        target_samples_per_s=args.target_samples_per_s,
        host_count=args.hosts,
        probe_gpu_decode=True,  # a separate process: a CUDA context here costs nothing
    )
    print(json.dumps(rec.to_json(), indent=2) if args.json else rec.summary())
    return 0
