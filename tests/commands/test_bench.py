"""commands/bench.py: its arguments (the measurement itself runs from the CLI in
tests/tools/test_bench.py)."""

from __future__ import annotations

import pytest

from jaxload.cli import build_parser


def test_defaults_and_types():
    args = build_parser().parse_args(["bench", "ds"])
    assert (args.path, args.workers, args.batch_size) == ("ds", 2, 32)
    assert (args.seconds, args.warmup, args.windows) == (20.0, 5.0, None)
    assert not (args.no_decode_limit or args.in_process) and args.lerobot_source is None
    args = build_parser().parse_args(
        ["bench", "ds", "--workers", "0", "--seconds", "1.5", "--in-process", "--json", "b.json"]
    )
    assert (args.workers, args.seconds, args.in_process, args.json) == (0, 1.5, True, "b.json")


def test_a_non_number_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["bench", "ds", "--workers", "two"])
    assert exit_.value.code == 2 and "--workers: invalid int value" in capsys.readouterr().err
