"""commands/info.py: `jaxload info` on a converted dataset and on a LeRobot source, run
in this process through the CLI's entry point."""

from __future__ import annotations

import json
from types import SimpleNamespace

from jaxload.cli import main
from jaxload.commands import info


def test_info_of_a_dataset_lists_episodes_features_cameras_and_stats(converted, capsys):
    assert main(["info", str(converted)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{converted}: jaxload dataset, format version")
    assert "  2 episodes, 8 frames at 10 fps, 2 tasks; 1 shard, " in out
    assert "  source: LeRobot v3.0, robot synthetic_arm" in out
    assert "observation.images.top: video h264 48x64, GOPs of the source; exact" in out
    assert f"stats (every dimension: jaxload stats {converted}):" in out
    assert "    action [4]: min " in out
    assert f"a picture of its samples: jaxload show {converted}" in out


def test_info_json_is_info_json(converted, capsys):
    assert main(["info", str(converted), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    on_disk = json.loads((converted / "meta/info.json").read_text())
    assert printed["fingerprint"] == on_disk["fingerprint"]
    assert printed["total_frames"] == 8


def test_info_of_a_lerobot_source_says_it_is_not_converted(lerobot_src, capsys):
    assert main(["info", str(lerobot_src)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{lerobot_src}: LeRobot v3.0 dataset (not converted)")
    assert "  fps 10, 2 episodes, 8 frames, 2 tasks" in out
    assert "  observation.images.top: video [48, 64, 3]" in out
    assert f"convert it first: jaxload convert {lerobot_src} OUT" in out
    assert main(["info", str(lerobot_src), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["codebase_version"] == "v3.0"


def test_show_is_refused_for_json_and_for_a_source(converted, lerobot_src, capsys):
    assert main(["info", str(converted), "--json", "--show"]) == 1
    assert "--show draws a jaxload dataset's samples; --json prints metadata only" in (
        capsys.readouterr().err
    )
    assert main(["info", str(lerobot_src), "--show", "x.png"]) == 1
    assert "convert it first: jaxload convert" in capsys.readouterr().err


def test_source_line():
    assert info._source({}) == "unknown"
    source = {"codebase_version": "v2.1", "repo_id": "lerobot/pusht", "revision": "a" * 40,
              "robot_type": "so100", "format": "x", "extra": "y", "none": None}  # fmt: skip
    assert info._source(source) == (
        f"LeRobot v2.1, hub lerobot/pusht @ {'a' * 12}, robot so100, extra y"
    )


def test_camera_line_says_copied_lossless_or_reencoded():
    cam = SimpleNamespace(codec="h264", source_codec="av1", height=4, width=6, gop=4, crf=20)
    assert info._camera(cam, {"min": 38.5, "mean": 41.25}) == (
        "video h264 4x6, gop 4, crf 20 (from av1); re-encoded: PSNR vs source min 38.50 dB, "
        "mean 41.25 dB"
    )
    assert info._camera(cam, {"min": None}).endswith(
        "exact: a lossless re-encode, every frame identical to the source"
    )
    assert "exact: the source stream copied" in info._camera(
        SimpleNamespace(codec="av1", source_codec="av1", height=4, width=6, gop=None, crf=None),
        None,
    )
    assert info._resize_flag({"resize": "2x2"}) == "--resize 2x2"
    assert info._resize_flag({"max_size": 64}) == "--max-size 64"
