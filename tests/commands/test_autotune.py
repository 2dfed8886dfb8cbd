"""commands/autotune.py: its arguments (the recommendation runs from the CLI in
tests/tools/test_autotune.py)."""

from __future__ import annotations

import pytest

from jaxload.cli import build_parser


def test_paths_windows_and_targets_are_parsed():
    args = build_parser().parse_args(
        [
            "autotune",
            "a",
            "b",
            "--delta-timestamps",
            '{"action": [0, 0.1]}',
            "--target-samples-per-s",
            "250",
            "--hosts",
            "4",
            "--json",
        ]
    )
    assert args.paths == ["a", "b"] and args.delta_timestamps == {"action": [0, 0.1]}
    assert (args.target_samples_per_s, args.hosts, args.json) == (250.0, 4, True)
    defaults = build_parser().parse_args(["autotune", "a"])
    assert (defaults.delta_timestamps, defaults.hosts, defaults.json) == (None, 1, False)


def test_windows_that_are_not_json_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["autotune", "a", "--delta-timestamps", "{action: 1}"])
    assert exit_.value.code == 2 and "--delta-timestamps: invalid loads value" in (
        capsys.readouterr().err
    )
