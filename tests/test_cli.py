"""jaxload/cli.py: commands discovered from jaxload/commands/, one-line errors with exit
status 1 (the traceback with --debug or JAXLOAD_DEBUG=1), 130 and the command's rerun
hint after Ctrl-C, 141 when stdout's reader goes away. In this process: the scenarios
that need a real terminal or a shell pipe are in tests/cli/."""

from __future__ import annotations

import io
import os
import pkgutil
import sys

import pytest

from jaxload import cli, commands
from jaxload.commands import convert
from jaxload.errors import DatasetError
from tests.support.lerobot_factory import write_lerobot_v3


def test_every_module_of_commands_is_a_subcommand():
    parser = cli.build_parser()
    names = {m.name for m in pkgutil.iter_modules(commands.__path__)}
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {n.replace("_", "-") for n in names}
    args = parser.parse_args(["info", "x", "--debug"])  # --debug also after the command
    assert args.debug and args.command_module.NAME == "info"
    assert not parser.parse_args(["info", "x"]).debug
    assert parser.parse_args(["--debug", "info", "x"]).debug  # not reset by the subparser


def test_an_error_is_one_line_and_debug_adds_the_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("JAXLOAD_DEBUG", raising=False)
    missing = str(tmp_path / "nope")
    assert cli.main(["info", missing]) == 1
    err = capsys.readouterr().err
    assert err.startswith("jaxload info: error: ") and missing in err and err.count("\n") == 1
    assert cli.main(["--debug", "info", missing]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err
    monkeypatch.setenv("JAXLOAD_DEBUG", "1")
    assert cli.main(["info", missing]) == 1
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("JAXLOAD_DEBUG", "0")
    assert cli.main(["info", missing]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_ctrl_c_exits_130_with_the_commands_rerun_hint(monkeypatch, capsys):
    # Ctrl-C cannot be pressed in a test: the command's run raises what it would raise
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(convert, "run", interrupted)
    assert cli.main(["convert", "src", "out"]) == 130
    assert capsys.readouterr().err == f"jaxload convert: interrupted; {convert.INTERRUPTED}\n"


def test_a_closed_stdout_ends_quietly_with_141(tmp_path, monkeypatch):
    src = write_lerobot_v3(tmp_path / "src", episode_lengths=(2,), cameras={})
    read, write = os.pipe()
    os.close(read)  # the reader went away: writing raises BrokenPipeError
    pipe = io.TextIOWrapper(os.fdopen(write, "wb", buffering=0), write_through=True)
    monkeypatch.setattr(sys, "stdout", pipe)
    try:
        assert cli.main(["info", str(src)]) == 141
    finally:
        pipe.close()


def test_describe():
    assert cli.describe(DatasetError("ds: bad")) == "ds: bad"
    error = FileNotFoundError(2, "No such file or directory", "/x/y")
    assert cli.describe(error) == "No such file or directory: /x/y"
    assert cli.describe(OSError(5, "I/O error")) == "I/O error"
    assert cli.describe(ValueError("odd")) == (
        "ValueError: odd (an unexpected error: --debug shows the traceback)"
    )
    assert cli.describe(ValueError("odd"), debug=True) == "ValueError: odd"


def test_version_is_the_package_metadata(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out == f"jaxload {version('jaxload')}\n"
