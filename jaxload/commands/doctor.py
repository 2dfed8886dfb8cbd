"""jaxload doctor PATH: named checks, one line each; exit status = failed checks.

Examples:
    jaxload doctor path/to/lerobot_dataset   # before converting: what would break
    jaxload doctor out/pusht                 # a converted dataset, every record read once
    jaxload doctor s3://bucket/pusht         # the same checks, records fetched by byte range

A PATH that is neither a directory nor a hub dataset, or a URL with no dataset there, is
one error line (exit status 1).
"""

import argparse

from jaxload.tools.dataset_path import add_storage_option

NAME = "doctor"
HELP = "check a LeRobot source or a jaxload dataset (exit status = failed checks)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help="a jaxload dataset: a directory or a URL (s3://, gs://, hf://, https://); or a "
        "LeRobot source: a directory, a hub dataset id (lerobot/pusht) or an fsspec URL",
    )
    add_storage_option(parser, "PATH a URL")


def run(args: argparse.Namespace) -> int:
    from jaxload.tools.dataset_path import (
        JAXLOAD,
        dataset_kind,
        refuse_options_for_local,
        storage_options_of,
    )
    from jaxload.tools.doctor import check_dataset

    options = storage_options_of(args)
    refuse_options_for_local(args.path, options)
    if dataset_kind(args.path, options) == JAXLOAD:
        kind, results = "jaxload dataset", check_dataset(args.path, options)
    else:
        from jaxload.converters.doctor import check_source

        kind, results = "LeRobot source", check_source(args.path, storage_options=options)
    print(f"{args.path} ({kind})")
    for result in results:
        print(result.line())
    failed = sum(r.status == "FAIL" for r in results)
    print(f"{failed} failed, {sum(r.status == 'ok' for r in results)} passed")
    if kind == "LeRobot source" and not failed:
        print(f"ready to convert: jaxload convert {args.path} OUT")
    return failed
