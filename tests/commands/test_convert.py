"""commands/convert.py: `jaxload convert` through the CLI in this process: its arguments
reach the converter (episodes, codec, shard size) and the summary is printed."""

from __future__ import annotations

import json

from jaxload import format as fmt
from jaxload.cli import main


def test_convert_prints_the_summary_and_passes_the_arguments(lerobot_src, tmp_path, capsys):
    out = tmp_path / "ds"
    argv = ["convert", str(lerobot_src), str(out), "--no-progress", "--workers", "1",
            "--episodes", "1", "--video-codec", "h264", "--gop", "2", "--crf", "20",
            "--shard-mb", "0.5", "--tune", "none", "--repo-id", "me/ds"]  # fmt: skip
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "fidelity observation.images.top: PSNR min" in said  # the report's summary
    info = fmt.read_info(out)
    assert (info.total_episodes, info.total_frames) == (1, 3)
    camera = info.cameras["observation.images.top"]
    assert (camera.codec, camera.gop, camera.crf) == ("h264", 2, 20)
    raw = json.loads((out / "meta/info.json").read_text())
    assert raw["source"]["repo_id"] == "me/ds"
    assert raw["converter"]["tune"] is None  # "none" (the default would be fastdecode)
    assert raw["converter"]["shard_bytes"] == 2**19


def test_retries_below_one_is_a_usage_error(lerobot_src, tmp_path, capsys):
    assert main(["convert", str(lerobot_src), str(tmp_path / "o"), "--retries", "0"]) == 2
    assert "jaxload convert: error: --retries must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_bad_argument_is_one_line_and_nothing_is_written(lerobot_src, tmp_path, capsys):
    argv = ["convert", str(lerobot_src), str(tmp_path / "o"), "--workers", "1",
            "--no-progress", "--episodes", "7"]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("jaxload convert: error: ") and err.count("\n") == 1
    assert "7" in err and not (tmp_path / "o").exists()
