"""The `jaxload` command line.

Each subcommand is a module in `jaxload/commands/` defining `NAME`, `HELP`,
`add_arguments(parser)` and `run(args) -> int`; modules are discovered, so adding a
command never touches this file. Heavy imports stay inside `run`.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from jaxload import commands
from jaxload.errors import JaxloadError


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.command_module.run(args)
    except JaxloadError as e:
        print(f"jaxload {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"jaxload {args.command}: interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxload", description="LeRobot datasets as deterministic Grain pipelines for JAX"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(command_module=module)
    return parser


if __name__ == "__main__":
    sys.exit(main())
