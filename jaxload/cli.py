"""The `jaxload` command line.

Each subcommand is a module in `jaxload/commands/` defining `NAME`, `HELP`,
`add_arguments(parser)` and `run(args) -> int`, and optionally `INTERRUPTED` (what a rerun
after Ctrl-C does); modules are discovered, so adding a command never touches this file.
Heavy imports stay inside `run`.

Errors end the command with a one-line message and exit status 1 (130 for Ctrl-C); the
traceback is shown with `--debug` or JAXLOAD_DEBUG=1. When the reader of stdout goes away
(`jaxload stats ds | head -3`) the command stops quietly with status 141 (128 + SIGPIPE,
as a shell reports for a command killed by a closed pipe).

Example::

    jaxload --version
    jaxload info out/pusht
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import pkgutil
import sys
import traceback
from collections.abc import Sequence

from jaxload import commands
from jaxload.errors import JaxloadError


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `jaxload ARGS` and returns its exit status (the console script's entry point)."""
    try:
        return _main(argv)
    except BrokenPipeError:
        return _stdout_closed()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("JAXLOAD_DEBUG", "") not in ("", "0")
    try:
        status = args.command_module.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return status
    except KeyboardInterrupt:
        _traceback(debug)
        rerun = getattr(args.command_module, "INTERRUPTED", "")
        print(
            f"jaxload {args.command}: interrupted{'; ' + rerun if rerun else ''}", file=sys.stderr
        )
        return 130
    except BrokenPipeError:
        raise
    except Exception as e:
        _traceback(debug)
        print(f"jaxload {args.command}: error: {describe(e, debug)}", file=sys.stderr)
        return 1


def _stdout_closed() -> int:
    """The reader of stdout went away: stop without a traceback. Pointing stdout at
    /dev/null keeps the interpreter's last flush from raising the same error again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass
    return 141


def version() -> str:
    """The installed jaxload's version (package metadata)."""
    try:
        return importlib.metadata.version("jaxload")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def describe(error: Exception, debug: bool = False) -> str:
    """One line for an error: jaxload's own messages as they are, others with their kind."""
    if isinstance(error, JaxloadError):
        return str(error)
    if isinstance(error, OSError) and error.strerror:
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}"
    hint = "" if debug else " (an unexpected error: --debug shows the traceback)"
    return f"{type(error).__name__}: {error}{hint}"


def _traceback(debug: bool) -> None:
    if debug:
        traceback.print_exc()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxload", description="LeRobot datasets as deterministic Grain pipelines for JAX"
    )
    debug_help = "show the traceback of an error (also JAXLOAD_DEBUG=1)"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    parser.add_argument(
        "--version", action="version", version=f"jaxload {version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        # Also after the command; SUPPRESS keeps a `jaxload --debug CMD` from being reset.
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help
        )
        command.set_defaults(command_module=module)
    return parser


if __name__ == "__main__":
    sys.exit(main())
