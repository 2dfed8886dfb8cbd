"""jaxload doctor PATH: named checks, one line each; exit status = failed checks.

Examples:
    jaxload doctor path/to/lerobot_dataset   # before converting: what would break
    jaxload doctor out/pusht                 # a converted dataset, every record read once

A PATH that is neither a directory nor a hub dataset is one error line (exit status 1).
"""

import argparse

NAME = "doctor"
HELP = "check a LeRobot source or a jaxload dataset (exit status = failed checks)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help="a jaxload dataset directory, or a LeRobot source: a directory, a hub dataset "
        "id (lerobot/pusht) or an fsspec URL",
    )


def run(args: argparse.Namespace) -> int:
    from jaxload.tools.doctor import check_dataset, is_jaxload_dataset

    if is_jaxload_dataset(args.path):
        kind, results = "jaxload dataset", check_dataset(args.path)
    else:
        from jaxload.converters.doctor import check_source

        kind, results = "LeRobot source", check_source(args.path)
    print(f"{args.path} ({kind})")
    for result in results:
        print(result.line())
    failed = sum(r.status == "FAIL" for r in results)
    print(f"{failed} failed, {sum(r.status == 'ok' for r in results)} passed")
    if kind == "LeRobot source" and not failed:
        print(f"ready to convert: jaxload convert {args.path} OUT")
    return failed
