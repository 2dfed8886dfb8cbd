"""Tests for tests/support/lerobot_factory.py: lerobot-0.4.4 layout, frame LEDs, stats, determinism."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torchcodec.decoders import VideoDecoder

from tests.support.lerobot_factory import (
    decode_frame_leds,
    feature_stats,
    frame_state,
    render_frame,
    write_lerobot_v3,
)

pytestmark = pytest.mark.integration

TWO_CAMERAS = {"observation.images.top": (48, 64), "observation.images.wrist": (40, 80)}
STAT_NAMES = ["min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"]


def _multi_file(root: Path, codec: str) -> Path:
    """A 2-camera dataset whose files split at different episodes per camera."""
    return write_lerobot_v3(
        root,
        fps=30,
        episode_lengths=(3, 1, 4, 2, 5),
        episode_tasks=["pick", "place", ["pick", "push"], "place", "push"],
        cameras=TWO_CAMERAS,
        video_codec=codec,
        state_dim=8,
        action_dim=8,
        episodes_per_data_file=2,
        episodes_per_video_file={"observation.images.top": 2, "observation.images.wrist": 3},
        episodes_per_meta_file=3,
    )


def _episodes(root: Path) -> list[dict[str, Any]]:
    files = sorted(root.glob("meta/episodes/chunk-*/file-*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def _schema(root: Path, pattern: str) -> pa.Schema:
    return pq.read_schema(sorted(root.glob(pattern))[0])


def _video_path(root: Path, row: dict[str, Any], key: str) -> Path:
    chunk, file = row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"]
    return root / f"videos/{key}/chunk-{chunk:03d}/file-{file:03d}.mp4"


def _check_episode_leds(root: Path, fps: int) -> int:
    """Decode every frame as lerobot does (from_timestamp + t/fps -> index); check LEDs and pts."""
    info = json.loads((root / "meta" / "info.json").read_text())
    keys = [k for k, ft in info["features"].items() if ft["dtype"] == "video"]
    decoders: dict[Path, VideoDecoder] = {}
    checked = 0
    for row in _episodes(root):
        for key in keys:
            path = _video_path(root, row, key)
            decoder = decoders.setdefault(path, VideoDecoder(str(path)))
            times = [row[f"videos/{key}/from_timestamp"] + t / fps for t in range(row["length"])]
            batch = decoder.get_frames_at(
                [round(ts * decoder.metadata.average_fps) for ts in times]
            )
            assert np.allclose(batch.pts_seconds.numpy(), times, atol=1e-4, rtol=0)
            leds = [decode_frame_leds(f.permute(1, 2, 0).numpy()) for f in batch.data]
            assert leds == [t % 256 for t in range(row["length"])], (key, row["episode_index"])
            checked += len(leds)
    return checked


def _assert_same_layout(mine: Path, ref: Path) -> None:
    """Same info.json keys, parquet schemas (types, names, metadata keys) and stats structure."""
    info, ref_info = (json.loads((p / "meta" / "info.json").read_text()) for p in (mine, ref))
    assert list(info) == list(ref_info)
    assert list(info["features"]) == list(ref_info["features"])
    for key, ft in ref_info["features"].items():
        assert list(info["features"][key]) == list(ft), key
        assert list(info["features"][key].get("info", {})) == list(ft.get("info", {})), key
    for name in ("codebase_version", "chunks_size", "data_path", "video_path", "robot_type"):
        assert info[name] == ref_info[name], name
    for pattern in ("data/*/*.parquet", "meta/episodes/*/*.parquet", "meta/tasks.parquet"):
        schema, ref_schema = _schema(mine, pattern), _schema(ref, pattern)
        assert schema.equals(ref_schema, check_metadata=False), pattern
        assert (schema.metadata or {}).keys() == (ref_schema.metadata or {}).keys(), pattern
    hf, ref_hf = (
        json.loads(_schema(p, "data/*/*.parquet").metadata[b"huggingface"]) for p in (mine, ref)
    )
    assert hf["info"] == ref_hf["info"]
    stats, ref_stats = (json.loads((p / "meta" / "stats.json").read_text()) for p in (mine, ref))
    assert {k: list(v) for k, v in stats.items()} == {k: list(v) for k, v in ref_stats.items()}


def test_frame_content_identifies_itself() -> None:
    assert np.float32(frame_state(1676, 16)) == 1676 * 10000 + 16
    for frame_index in range(0, 300, 7):
        image = render_frame(48, 64, 3, frame_index)
        assert image.dtype == np.uint8 and image.shape == (48, 64, 3)
        assert decode_frame_leds(image) == frame_index % 256
    assert not np.array_equal(render_frame(48, 64, 0, 5), render_frame(48, 64, 1, 5))
    with pytest.raises(ValueError, match="too small"):
        render_frame(32, 40, 0, 0)


def test_tabular_rows_and_metadata(tmp_path: Path) -> None:
    root = write_lerobot_v3(
        tmp_path / "ds",
        cameras={},
        episode_lengths=(3, 1, 4),
        episodes_per_data_file=2,
        extra_features={"next.reward": "float32", "next.done": "bool"},
    )
    assert not (root / "videos").exists()
    info = json.loads((root / "meta" / "info.json").read_text())
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 8, 2)
    assert info["splits"] == {"train": "0:3"} and info["video_path"] is None
    files = sorted(root.glob("data/chunk-000/file-*.parquet"))
    assert [pq.ParquetFile(f).metadata.num_row_groups for f in files] == [2, 1]
    table = pa.concat_tables([pq.read_table(f) for f in files])
    assert table.schema.field("next.reward").type == pa.float32()
    assert table.schema.field("next.done").type == pa.bool_()
    assert table.schema.field("timestamp").type == pa.float32()
    rows = table.to_pylist()
    assert [r["index"] for r in rows] == list(range(8))
    assert [(r["episode_index"], r["frame_index"]) for r in rows][3:6] == [(1, 0), (2, 0), (2, 1)]
    for r in rows:
        assert r["observation.state"][0] == frame_state(r["episode_index"], r["frame_index"])
        assert r["action"][0] == r["observation.state"][0] + 0.5
        assert r["timestamp"] == np.float32(r["frame_index"] / 10)
    assert [r["next.done"] for r in rows] == [False, False, True, True, False, False, False, True]
    tasks = pq.read_table(root / "meta" / "tasks.parquet").to_pylist()
    assert [t["task_index"] for t in tasks] == [0, 1]
    episodes = _episodes(root)
    assert [(e["dataset_from_index"], e["dataset_to_index"]) for e in episodes] == [
        (0, 3),
        (3, 4),
        (4, 8),
    ]
    assert [e["data/file_index"] for e in episodes] == [0, 0, 1]
    stats = json.loads((root / "meta" / "stats.json").read_text())
    assert stats["index"]["count"] == [8] and stats["index"]["max"] == [7]


def test_video_files_split_per_camera(tmp_path: Path) -> None:
    root = _multi_file(tmp_path / "ds", "h264")
    episodes = _episodes(root)
    top = [e["videos/observation.images.top/file_index"] for e in episodes]
    wrist = [e["videos/observation.images.wrist/file_index"] for e in episodes]
    assert (top, wrist) == ([0, 0, 1, 1, 2], [0, 0, 0, 1, 1])
    assert [e["meta/episodes/file_index"] for e in episodes] == [0, 0, 0, 1, 1]
    assert [e["tasks"] for e in episodes][2] == ["pick", "push"]
    for key in TWO_CAMERAS:
        end: dict[int, float] = {}
        for e in episodes:
            file = e[f"videos/{key}/file_index"]
            start = e[f"videos/{key}/from_timestamp"]
            assert start == end.get(file, 0.0)  # starts where the previous episode in it ended
            end[file] = e[f"videos/{key}/to_timestamp"]
            assert end[file] == start + e["length"] / 30
    assert episodes[3]["videos/observation.images.top/from_timestamp"] == 4 / 30
    image_std = episodes[0]["stats/observation.images.top/std"]
    assert np.asarray(image_std).shape == (3, 1, 1)


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_leds_survive_encoding(tmp_path: Path, codec: str) -> None:
    root = _multi_file(tmp_path / "ds", codec)
    codec_name = json.loads((root / "meta" / "info.json").read_text())["features"][
        "observation.images.top"
    ]["info"]["video.codec"]
    assert codec_name == codec
    assert _check_episode_leds(root, fps=30) == 2 * 15


def test_defaults_write_and_decode(tmp_path: Path) -> None:
    """Default args: one h264 camera, a 1-frame episode between others in one mp4."""
    root = write_lerobot_v3(tmp_path / "ds")
    assert len(list(root.glob("videos/*/chunk-000/*.mp4"))) == 1
    assert _check_episode_leds(root, fps=10) == 5 + 1 + 2 + 12


def test_same_args_same_bytes(tmp_path: Path) -> None:
    def digest(root: Path) -> dict[str, str]:
        files = sorted(p for p in root.rglob("*") if p.is_file())
        return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}

    args = {"episode_lengths": (4, 1, 6), "cameras": {"cam": (42, 84)}}
    first = digest(write_lerobot_v3(tmp_path / "a", **args))
    assert first == digest(write_lerobot_v3(tmp_path / "b", **args))
    with pytest.raises(FileExistsError):
        write_lerobot_v3(tmp_path / "a", **args)


def test_layout_matches_av1_multi(shared_lerobot: Path, tmp_path: Path) -> None:
    root = _multi_file(tmp_path / "ds", "av1")
    _assert_same_layout(root, shared_lerobot / "av1_multi")


def test_layout_matches_tabular_only(shared_lerobot: Path, tmp_path: Path) -> None:
    root = write_lerobot_v3(tmp_path / "ds", cameras={}, fps=50, state_dim=14, action_dim=14)
    _assert_same_layout(root, shared_lerobot / "tabular_only")


def test_stats_match_lerobot(shared_lerobot: Path) -> None:
    """Per-episode stats recomputed from tabular_only's data equal what lerobot stored."""
    ref = shared_lerobot / "tabular_only"
    data = pq.read_table(ref / "data" / "chunk-000" / "file-000.parquet")
    columns = {k: np.asarray(data.column(k).to_pylist()) for k in data.column_names}
    columns["observation.state"] = columns["observation.state"].astype(np.float32)
    columns["action"] = columns["action"].astype(np.float32)
    columns["timestamp"] = columns["frame_index"] / 50  # lerobot's buffer holds float64 t / fps
    for row in _episodes(ref):
        span = slice(row["dataset_from_index"], row["dataset_to_index"])
        for key, values in columns.items():
            stats = feature_stats(values[span].reshape(row["length"], -1))
            for name in STAT_NAMES:
                assert stats[name].tolist() == row[f"stats/{key}/{name}"], (key, name)


def test_fixture_av1_multi_leds(shared_lerobot: Path) -> None:
    assert _check_episode_leds(shared_lerobot / "av1_multi", fps=30) == 2 * 1247
