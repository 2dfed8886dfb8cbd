"""A new user's first hour with the `jaxload` CLI (issue 18), through the real CLI in a
subprocess: paths that are neither a directory nor a hub dataset, `jaxload stats`,
`--version`, help texts, `--episodes` errors, `info`'s formatting, a raw LeRobot directory
given where a jaxload dataset is needed, `doctor` on a missing path, a closed stdout pipe
and x265's log.

There is no network here: the hub is reached through the real huggingface_hub pointed at
a closed port on loopback (HF_ENDPOINT=http://127.0.0.1:9) or told it is offline
(HF_HUB_OFFLINE=1). Nothing else is mocked.
"""

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jaxload
from jaxload.cli import build_parser
from jaxload.converters.convert import convert
from jaxload.converters.hub import is_repo_id
from jaxload.errors import DatasetError
from jaxload.stats import load_stats, stats_to_json
from tests.support.lerobot_factory import write_lerobot_v3

# Every test starts the CLI in a fresh interpreter.
pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]
CLOSED_PORT = "http://127.0.0.1:9"
# The old behaviour waited out 6 attempts of backoff (~13 s) before failing.
QUICK_S = 10.0
CONVERT_FIRST = "is a LeRobot dataset (v3.0), not a jaxload dataset: convert it first with"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """A 6-episode LeRobot source and its jaxload conversion."""
    root = tmp_path_factory.mktemp("first_hour")
    src = write_lerobot_v3(
        root / "src", episode_lengths=(4, 6, 3, 5, 4, 6), cameras={"top": (48, 64)}
    )
    convert(src, root / "ds", workers=1, progress=False)
    return src, root / "ds"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HUB_DISABLE_TELEMETRY": "1", "HF_ENDPOINT": CLOSED_PORT}
    return env | extra


def _cli(*args, cwd=REPO, env=None, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jaxload.cli", *map(str, args)],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env or _env(),
        timeout=300,
    )


def _timed(*args, **kw) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    run = _cli(*args, **kw)
    return run, time.monotonic() - started


def _one_error_line(run: subprocess.CompletedProcess, command: str) -> str:
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 1, run.stderr
    assert len(lines) == 1 and lines[0].startswith(f"jaxload {command}: error: "), run.stderr
    return lines[0]


# --- SRC: a local directory, else a hub dataset, one message naming both ---------------


@pytest.mark.parametrize("command", ["convert", "info", "doctor"])
def test_mistyped_path_with_a_slash_fails_at_once_naming_directory_and_hub(tmp_path, command):
    (tmp_path / "mydata" / "h264-single").mkdir(parents=True)
    args = [command, "mydata/h264_single"] + (["out"] if command == "convert" else [])
    run, elapsed = _timed(*args, cwd=tmp_path)
    line = _one_error_line(run, command)
    assert (
        "mydata/h264_single: no such local directory, and cannot reach the Hugging Face Hub "
        f"at {CLOSED_PORT} to look for a dataset 'mydata/h264_single'"
    ) in line
    assert line.endswith("did you mean mydata/h264-single?"), line
    assert elapsed < QUICK_S, elapsed
    assert not (tmp_path / "out").exists()


def test_offline_mode_says_the_hub_was_not_asked(tmp_path):
    run, elapsed = _timed(
        "convert", "someone/dataset", "out", cwd=tmp_path, env=_env(HF_HUB_OFFLINE="1")
    )
    line = _one_error_line(run, "convert")
    assert line.endswith(
        "someone/dataset: no such local directory, and HF_HUB_OFFLINE is set, so the Hugging "
        "Face Hub was not asked for 'someone/dataset'"
    ), line
    assert elapsed < QUICK_S, elapsed


@pytest.mark.parametrize("src", ["./mydata/x", "../x", "~/x", "a/b/c", "pusht", "a--b/c"])
def test_a_name_that_cannot_be_a_hub_id_is_never_sent_to_the_hub(tmp_path, src):
    assert not is_repo_id(src)
    run, elapsed = _timed("info", src, cwd=tmp_path)
    line = _one_error_line(run, "info")
    assert line.endswith(
        f"{src}: no such local directory (and not a Hugging Face dataset id either: those "
        "have the form owner/name)"
    ), line
    assert elapsed < QUICK_S, elapsed


def test_repo_id_rules():
    for good in ("lerobot/pusht", "user_1/my.data-set", "_a/b_"):
        assert is_repo_id(good), good
    for bad in ("/abs/x", "a/b.git", "a/b.", "a/" + "x" * 97, "a/b c", "a..b/c"):
        assert not is_repo_id(bad), bad


# --- jaxload stats, and info's stats section --------------------------------------------


def test_stats_prints_a_table_per_key(datasets):
    _, ds = datasets
    run = _cli("stats", ds)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert out.startswith(f"{ds}: normalization stats (meta/stats.json), 28 frames")
    assert re.search(r"^\s+dim\s+mean\s+std\s+min\s+max\s+q01\s+q99$", out, re.M)
    stats = load_stats(ds, sketch=False)
    for key in stats:
        assert re.search(rf"^{re.escape(key)}  .*count 28$", out, re.M), key
    # action has 4 named dimensions; the camera one row per channel.
    action = out.split("\naction  ")[1].split("\n\n")[0].splitlines()
    assert [row.split()[:2] for row in action[2:]] == [[str(i), f"joint_{i}"] for i in range(4)]
    assert float(action[2].split()[2]) == pytest.approx(float(stats["action"].mean[0]), rel=1e-5)
    assert re.search(r"^  R\s", out, re.M) and re.search(r"^  B\s", out, re.M)


def test_stats_json_and_out_file(datasets, tmp_path):
    _, ds = datasets
    expected = stats_to_json(load_stats(ds, ["action"], sketch=False))
    run = _cli("stats", ds, "--key", "action", "--json", "--out", tmp_path / "s.json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == expected
    assert json.loads((tmp_path / "s.json").read_text()) == expected
    assert os.listdir(tmp_path) == ["s.json"]  # written through a temp name, then replaced
    run = _cli("stats", ds, "--key", "nope")
    assert "no stats for 'nope' (has: top, " in _one_error_line(run, "stats")


def test_info_is_readable_with_a_stats_section(datasets):
    _, ds = datasets
    run = _cli("info", ds)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert not re.search(r"[{}']|None", out), out  # no Python reprs
    # The default copies the camera's stream: info says its frames are exact.
    assert re.search(
        r"^    top: video h264 48x64, GOPs of the source; exact: the source stream copied",
        out,
        re.M,
    ), out
    assert "source: LeRobot v3.0, robot synthetic_arm" in out
    assert f"  stats (every dimension: jaxload stats {ds}):" in out
    assert re.search(r"^    action \[4\]: min -?[\d.]+, max [\d.]+, mean .*\.\..*, std ", out, re.M)


# --- small things -------------------------------------------------------------------------


def test_version_comes_from_the_package_metadata():
    run = _cli("--version")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"jaxload {importlib.metadata.version('jaxload')}"


def test_every_argument_of_every_command_has_help():
    missing = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, sub)
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {action.option_strings or action.dest}")

    walk(build_parser(), "jaxload")
    assert not missing
    assert "local: a process pool" in _cli("convert", "--help").stdout


def test_episodes_error_summarises_ranges(datasets, tmp_path):
    src, _ = datasets
    run = _cli("convert", src, tmp_path / "out", "--episodes", "0-99", "--no-progress")
    line = _one_error_line(run, "convert")
    assert line.endswith(
        f"{src}: --episodes 0-99: episodes 6-99 do not exist (this dataset has 0-5)"
    )
    run = _cli("convert", src, tmp_path / "out", "--episodes", "2,8", "--no-progress")
    assert _one_error_line(run, "convert").endswith(
        "episode 8 does not exist (this dataset has 0-5)"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["bench", "autotune", "stats"])
def test_a_lerobot_directory_where_a_jaxload_dataset_is_needed(datasets, command):
    src, _ = datasets
    line = _one_error_line(_cli(command, src), command)
    assert line.endswith(f"{src} {CONVERT_FIRST} `jaxload convert {src} OUT`"), line


def test_open_and_info_on_a_lerobot_directory_point_to_convert(datasets):
    src, _ = datasets
    with pytest.raises(DatasetError, match=re.escape(f"{src} {CONVERT_FIRST}")):
        jaxload.open(src)
    run = _cli("info", src)
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip().endswith(f"convert it first: jaxload convert {src} OUT")


def test_doctor_on_a_missing_path_is_one_line(tmp_path):
    run = _cli("doctor", tmp_path / "nothing")
    line = _one_error_line(run, "doctor")
    assert line.endswith(
        f"{tmp_path / 'nothing'}: no such local directory (and not a Hugging Face dataset id either: those have the form owner/name)"
    )
    assert run.stdout == ""


def test_a_closed_stdout_pipe_ends_quietly(datasets):
    """`jaxload stats ds | head -1`: the reader is gone before the first write."""
    _, ds = datasets
    read, write = os.pipe()
    os.close(read)
    try:
        run = _cli("stats", ds, stdout=write)
    finally:
        os.close(write)
    assert run.returncode == 141, run.stderr  # 128 + SIGPIPE, as a shell reports it
    assert run.stderr == ""


def test_hevc_conversion_does_not_print_x265_log(datasets, tmp_path):
    src, _ = datasets
    run = _cli("convert", src, tmp_path / "out", "--video-codec", "hevc", "--no-progress")
    assert run.returncode == 0, run.stderr
    assert "x265 [" not in run.stderr, run.stderr[:2000]
