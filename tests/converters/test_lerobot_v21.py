"""LeRobot v2.1 sources: the same data in v2.1 and v3.0 form converts to the same dataset,
and `jaxload doctor` checks v2.1 sources as it checks v3.0 ones."""

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import jaxload
from jaxload.cli import main
from jaxload.converters.convert import convert
from jaxload.converters.lerobot_v21 import LeRobotV21Source
from jaxload.errors import JaxloadError
from tests.support.helpers import tree_bytes
from tests.support.lerobot_factory import decode_frame_leds, frame_state, write_lerobot_v3
from tests.support.lerobot_factory_v21 import write_lerobot_v21

pytestmark = pytest.mark.integration

LENGTHS = (5, 1, 2, 17, 9, 3)
DATA = {
    "fps": 10,
    "episode_lengths": LENGTHS,
    "episode_tasks": ["fold", "stack", ["fold", "stack"], "wipe", "stack", "fold"],
    "cameras": {"observation.images.top": (48, 64), "observation.images.wrist": (40, 72)},
    "video_codec": "av1",
    "extra_features": {"next.done": "bool"},
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("v21")
    v3 = write_lerobot_v3(
        root / "v3",
        episodes_per_data_file=2,
        episodes_per_video_file={"observation.images.top": 3, "observation.images.wrist": 2},
        **DATA,
    )
    v21 = write_lerobot_v21(root / "v21", **DATA)
    return v3, v21


@pytest.fixture(scope="module")
def converted(sources, tmp_path_factory):
    root = tmp_path_factory.mktemp("v21_out")
    v3, v21 = sources
    convert(v3, root / "from_v3", workers=1, gop=4, progress=False)
    convert(v21, root / "from_v21", workers=1, gop=4, progress=False)
    return root / "from_v3", root / "from_v21"


def test_v21_layout(sources):
    v21 = sources[1]
    assert (v21 / "data/chunk-000/episode_000003.parquet").is_file()
    assert (v21 / "videos/chunk-000/observation.images.wrist/episode_000005.mp4").is_file()
    lines = (v21 / "meta/episodes.jsonl").read_text().splitlines()
    assert json.loads(lines[2]) == {"episode_index": 2, "tasks": ["fold", "stack"], "length": 2}
    source = LeRobotV21Source(v21)
    assert [source.episode(e).start for e in source.episode_ids] == list(
        np.cumsum((0, *LENGTHS[:-1]))
    )
    assert not (v21 / "meta/stats.json").exists()


def test_v21_and_v30_of_the_same_data_give_identical_datasets(converted):
    from_v3, from_v21 = tree_bytes(converted[0]), tree_bytes(converted[1])
    assert sorted(from_v3) == sorted(from_v21)
    for name in sorted(from_v3):
        if name not in ("meta/info.json", "meta/stats.json"):
            assert from_v3[name] == from_v21[name], name  # shards, episodes, tasks: bytes
    info3, info21 = (json.loads(d["meta/info.json"]) for d in (from_v3, from_v21))
    assert info21["source"].pop("codebase_version") == "v2.1"
    assert info3["source"].pop("codebase_version") == "v3.0"
    # the digests of meta/stats.json differ as the files do (image stats from the source)
    assert info3.pop("stats_xxh3")["meta/stats.json"] != info21.pop("stats_xxh3")["meta/stats.json"]
    assert info3 == info21  # fingerprint included


def test_v21_and_v30_give_the_same_stats(converted):
    """Tabular stats are computed from the converted data (jaxload.stats): identical for v2.1
    and v3.0 sources. Image stats are carried over from the source: v2.1 has per-episode
    stats only (LeRobot aggregates them, without quantiles), v3.0 stored the same values."""
    from_v3, from_v21 = (json.loads((d / "meta/stats.json").read_text()) for d in converted)
    assert from_v21.keys() == from_v3.keys()
    for key, stats in from_v21.items():
        if key.startswith("observation.images."):
            assert set(stats) == {"min", "max", "mean", "std", "count"}
            for name, value in stats.items():
                np.testing.assert_allclose(value, from_v3[key][name], rtol=1e-6, err_msg=key)
        else:
            assert stats == from_v3[key], key
            assert {"q01", "q10", "q50", "q90", "q99"} <= set(stats)


def test_v21_conversion_reads_back(converted):
    ds = jaxload.open(converted[1])
    assert len(ds) == sum(LENGTHS)
    sample = ds[sum(LENGTHS[:3]) + 4]  # episode 3, frame 4
    assert sample["observation.state"][0] == np.float32(frame_state(3, 4))
    assert decode_frame_leds(sample["observation.images.wrist"]) == 4
    assert [s["task"] for s in ds.__getitems__([6, 7])] == ["fold", "stack"]


def test_doctor_passes_a_healthy_v21_source(sources, capsys):
    assert main(["doctor", str(sources[1])]) == 0
    out = capsys.readouterr().out
    assert "codebase v2.1" in out and out.count("[  ok]") == 7


def test_doctor_names_a_short_v21_video(sources, tmp_path, capsys):
    src = shutil.copytree(sources[1], tmp_path / "src")
    short = "videos/chunk-000/observation.images.top/episode_000001.mp4"  # 1 frame
    shutil.copyfile(src / short, src / "videos/chunk-000/observation.images.top/episode_000002.mp4")
    assert main(["doctor", str(src)]) == 1
    out = capsys.readouterr().out
    assert "episode_000002.mp4: holds 1 frames, but episode 2" in out and "1 frames short" in out


def test_v21_index_that_does_not_follow_cumulative_lengths(sources, tmp_path, capsys):
    src = shutil.copytree(sources[1], tmp_path / "src")
    path = src / "data/chunk-000/episode_000004.parquet"
    table = pq.read_table(path)
    index = table.column_names.index("index")
    shifted = [v + 100 for v in table["index"].to_pylist()]
    pq.write_table(table.set_column(index, table.schema.field("index"), [shifted]), path)
    with pytest.raises(
        JaxloadError,
        match=r"episode_000004\.parquet: episode 4: first frame has index 125, expected 25",
    ):
        convert(src, tmp_path / "out", workers=1, progress=False)
    assert main(["doctor", str(src)]) == 1
    assert "episode_000004.parquet: episode 4: first frame has index 125" in capsys.readouterr().out


def test_v21_missing_episode_file_is_named(sources, tmp_path):
    src = shutil.copytree(sources[1], tmp_path / "src")
    (src / "videos/chunk-000/observation.images.wrist/episode_000003.mp4").unlink()
    with pytest.raises(
        JaxloadError,
        match=r"episode_000003\.mp4: missing \(video of episode 3, camera observation\.images\.wrist\)",
    ):
        convert(src, tmp_path / "out", workers=1, progress=False)
    assert not (tmp_path / "out").exists()


def test_v21_lengths_that_disagree_with_info(sources, tmp_path):
    src = shutil.copytree(sources[1], tmp_path / "src")
    lines = (src / "meta/episodes.jsonl").read_text().splitlines()
    first = json.loads(lines[0]) | {"length": 6}
    (src / "meta/episodes.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(
        JaxloadError,
        match=r"episodes\.jsonl: episode lengths sum to 38 frames but meta/info\.json says total_frames=37",
    ):
        convert(src, tmp_path / "out", workers=1, progress=False)
