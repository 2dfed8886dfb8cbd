"""converters/lerobot_v21.py, LeRobot v2.1 sources: the same data in v2.1 and v3.0 form
converts to the same dataset, and `jaxload doctor` checks v2.1 sources as it checks v3.0
ones (integration); the metadata readers and the stats aggregation on small files (fast)."""

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import jaxload
from jaxload.cli import main
from jaxload.converters.convert import convert
from jaxload.converters.lerobot_v21 import LeRobotV21Source
from jaxload.errors import JaxloadError, SourceError
from tests.support.helpers import tree_bytes
from tests.support.lerobot_factory import decode_frame_leds, frame_state, write_lerobot_v3
from tests.support.lerobot_factory_v21 import write_lerobot_v21

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


@pytest.mark.integration
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


@pytest.mark.integration
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


@pytest.mark.integration
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


@pytest.mark.integration
def test_v21_conversion_reads_back(converted):
    ds = jaxload.open(converted[1])
    assert len(ds) == sum(LENGTHS)
    sample = ds[sum(LENGTHS[:3]) + 4]  # episode 3, frame 4
    assert sample["observation.state"][0] == np.float32(frame_state(3, 4))
    assert decode_frame_leds(sample["observation.images.wrist"]) == 4
    assert [s["task"] for s in ds.__getitems__([6, 7])] == ["fold", "stack"]


@pytest.mark.integration
def test_doctor_passes_a_healthy_v21_source(sources, capsys):
    assert main(["doctor", str(sources[1])]) == 0
    out = capsys.readouterr().out
    assert "codebase v2.1" in out and out.count("[  ok]") == 7


@pytest.mark.integration
def test_doctor_names_a_short_v21_video(sources, tmp_path, capsys):
    src = shutil.copytree(sources[1], tmp_path / "src")
    short = "videos/chunk-000/observation.images.top/episode_000001.mp4"  # 1 frame
    shutil.copyfile(src / short, src / "videos/chunk-000/observation.images.top/episode_000002.mp4")
    assert main(["doctor", str(src)]) == 1
    out = capsys.readouterr().out
    assert "episode_000002.mp4: holds 1 frames, but episode 2" in out and "1 frames short" in out


@pytest.mark.integration
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


@pytest.mark.integration
def test_v21_missing_episode_file_is_named(sources, tmp_path):
    src = shutil.copytree(sources[1], tmp_path / "src")
    (src / "videos/chunk-000/observation.images.wrist/episode_000003.mp4").unlink()
    with pytest.raises(
        JaxloadError,
        match=r"episode_000003\.mp4: missing \(video of episode 3, camera observation\.images\.wrist\)",
    ):
        convert(src, tmp_path / "out", workers=1, progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
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


# --------------------------------------------------------------------------- fast
def _files(tmp_path, **texts):
    from jaxload.converters.files import LocalFiles

    (tmp_path / "meta").mkdir(exist_ok=True)
    for name, text in texts.items():
        (tmp_path / "meta" / f"{name}.jsonl").write_text(text)
    return LocalFiles(tmp_path)


def test_jsonl_lines_are_objects_named_by_line(tmp_path):
    from jaxload.converters.lerobot_v21 import read_jsonl

    files = _files(tmp_path, tasks='{"task_index": 0, "task": "a"}\n\n{"task_index": 1}\n')
    assert [n for n, _ in read_jsonl(files, "meta/tasks.jsonl")] == [1, 3]
    for text, message in (
        ("{\n", "line 1 is not valid JSON"),
        ("[1]\n", "line 1 is not a JSON object"),
    ):
        files = _files(tmp_path, tasks=text)
        with pytest.raises(SourceError, match=rf"meta/tasks\.jsonl: {message}"):
            read_jsonl(files, "meta/tasks.jsonl")
    with pytest.raises(SourceError, match=r"meta/none\.jsonl: missing"):
        read_jsonl(files, "meta/none.jsonl")


def test_episode_starts_are_cumulative_lengths_in_episode_order(tmp_path):
    from jaxload.converters.lerobot_v21 import read_episodes, read_tasks

    lines = ['{"episode_index": 2, "tasks": "b", "length": 4}',
             '{"episode_index": 0, "tasks": ["a", "b"], "length": 3}']  # fmt: skip
    files = _files(tmp_path, episodes="\n".join(lines))
    episodes = read_episodes(files, {"total_frames": 7, "total_episodes": 2})
    assert [(e.index, e.start, e.tasks) for e in episodes.values()] == [
        (0, 0, ("a", "b")),
        (2, 3, ("b",)),
    ]
    for info, message in (
        ({"total_frames": 8, "total_episodes": 2}, "lengths sum to 7 frames but .* total_frames=8"),
        ({"total_frames": 7, "total_episodes": 3}, "2 episodes but .* total_episodes=3"),
    ):
        with pytest.raises(SourceError, match=message):
            read_episodes(files, info)
    bad = {
        '{"episode_index": 0, "length": 0, "tasks": []}': "episode 0 has length 0",
        '{"episode_index": 0, "tasks": []}': "line 1 lacks an integer episode_index/length",
        lines[1] + "\n" + lines[1]: r"episode 0 is listed twice \(line 2\)",
        "": "no episodes",
    }
    for text, message in bad.items():
        with pytest.raises(SourceError, match=rf"meta/episodes\.jsonl: {message}"):
            read_episodes(_files(tmp_path, episodes=text), {"total_frames": 3, "total_episodes": 1})
    files = _files(tmp_path, tasks='{"task_index": 0, "task": "a"}\n{"task": "b"}')
    with pytest.raises(SourceError, match=r"tasks\.jsonl: line 2 lacks task_index/task"):
        read_tasks(files)


def test_aggregate_stats_is_count_weighted():
    from jaxload.converters.lerobot_v21 import aggregate_stats

    a = np.array([0.0, 2.0])  # 2 frames
    b = np.array([4.0, 4.0, 4.0, 10.0])  # 4 frames

    def part(x):
        return {"s": {"mean": np.array([x.mean()]), "std": np.array([x.std()]),
                      "min": np.array([x.min()]), "max": np.array([x.max()]),
                      "count": np.array([len(x)]), "q50": np.array([np.median(x)])}}  # fmt: skip

    out = aggregate_stats([part(a), part(b)])["s"]
    both = np.concatenate([a, b])
    assert out["mean"] == pytest.approx([both.mean()]) and out["std"] == pytest.approx([both.std()])
    assert (out["min"], out["max"], out["count"]) == ([0.0], [10.0], [6])
    assert out["q50"] == pytest.approx([(1.0 * 2 + 4.0 * 4) / 6])  # count-weighted
