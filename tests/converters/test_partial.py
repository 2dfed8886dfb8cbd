"""converters/partial.py: one conversion's partial directory. A matching plan resumes, a
different one is refused (or discarded with restart, downloads of the same source kept);
a unit counts as done only with its whole part; torn JSON reads as never written;
shard checkpoints stop at the first gap."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxload.converters.partial import (
    JobState,
    PlanMismatch,
    partial_dir,
    read_json,
    unit_summary,
    write_json_durable,
)
from jaxload.converters.units import UnitResult
from jaxload.errors import JaxloadError

PLAN = {"source": {"kind": "local", "location": "/src"}, "options": {"gop": 4}, "units": [[0]]}


def _episode(psnr_min, psnr_sum, count):
    stream = {"psnr_min": psnr_min, "psnr_sum": psnr_sum, "psnr_count": count}
    return {"episode_index": 0, "videos": {"top": stream}}


def _result(state, unit, data=b"records"):
    part = state.tmp_dir / f"u{unit}.part"
    part.write_bytes(data)
    return UnitResult(unit, [_episode(30.0, 90.0, 3)], str(part), sources={"f": {"size": 1}})


def _locked(root):
    """The directory as the caller's JobLock leaves it (created, with its lock file)."""
    root.mkdir()
    (root / "lock").write_text("pid 1")
    return root


def test_partial_dir_is_beside_out(tmp_path):
    assert partial_dir(tmp_path / "ds") == tmp_path / ".ds.partial"


def test_a_matching_plan_resumes_another_is_refused_unless_restart(tmp_path):
    root = _locked(tmp_path / ".ds.partial")
    state = JobState.open(root, PLAN)
    state.record_unit(_result(state, 0))
    (state.cache_dir / "meta").mkdir(parents=True)
    (state.tmp_dir / "in-flight.part").write_bytes(b"x")
    resumed = JobState.open(root, PLAN)
    assert list(resumed.done_units()) == [0] and not list(resumed.tmp_dir.iterdir())
    other = {**PLAN, "options": {"gop": 2}}
    with pytest.raises(
        PlanMismatch, match=r"another source, options or episodes \(1 finished units\); .*--restart"
    ):
        JobState.open(root, other)
    restarted = JobState.open(root, other, restart=True)
    assert restarted.plan() == other and restarted.done_units() == {}
    assert (root / "cache" / "meta").is_dir()  # same source: downloads kept
    JobState.open(root, {**other, "source": {"kind": "local", "location": "/b"}}, restart=True)
    assert not (root / "cache").exists() and (root / "lock").is_file()  # the lock stays


def test_a_unit_is_done_only_with_its_whole_part(tmp_path):
    state = JobState.open(_locked(tmp_path / "p"), PLAN)
    summary = state.record_unit(_result(state, 0))
    assert summary["unit"] == 0 and summary["sources"] == {"f": {"size": 1}}
    assert state.part_path(0).read_bytes() == b"records" and state.has_work()
    state.record_unit(UnitResult(1, [], None, part_bytes=b"bytes from ray"))
    assert sorted(state.done_units()) == [0, 1]
    state.part_path(1).write_bytes(b"torn")  # another size than recorded
    state.part_path(0).unlink()
    assert state.done_units() == {}
    record = state.unit_record_path(0)
    state.part_path(0).write_bytes(b"records")
    state.mark_assembled(0)
    assert not state.part_path(0).exists() and json.loads(record.read_text())["assembled"]
    assert list(state.done_units()) == [0]  # assembled: done without its part
    assert state.unit_episodes(0)[0]["videos"]["top"]["psnr_min"] == 30.0
    with pytest.raises(JaxloadError, match=r"unit-00007\.json: missing or unreadable"):
        state.unit_episodes(7)


def test_shard_checkpoints_stop_at_the_first_gap(tmp_path):
    state = JobState.open(_locked(tmp_path / "p"), PLAN)
    for shard in (0, 1, 3):
        write_json_durable(state.shard_checkpoint_path(shard), {"shard": shard, "rows": [shard]})
    assert state.shard_checkpoints() == [{"shard": 0}, {"shard": 1}]
    assert state.checkpoint_rows(1) == [1]
    with pytest.raises(JaxloadError, match=r"shard-00002\.json: missing or unreadable"):
        state.checkpoint_rows(2)
    assert state.published_fingerprint() is None
    state.mark_published("abc")
    assert state.published_fingerprint() == "abc"
    state.remove()
    assert not (tmp_path / "p").exists()


def test_torn_or_foreign_json_reads_as_never_written(tmp_path):
    path = tmp_path / "a.json"
    write_json_durable(path, {"b": 1, "a": [2]})
    assert read_json(path) == {"a": [2], "b": 1} and not list(tmp_path.glob(".*tmp"))
    path.write_text('{"a": ')
    assert read_json(path) is None
    path.write_text("[1, 2]")
    assert read_json(path) is None
    assert read_json(tmp_path / "none.json") is None


def test_unit_summary_keeps_the_worst_frame_and_per_episode_sums():
    record = {"unit": 4, "episodes": [_episode(31.0, 100.0, 3), _episode(29.5, 60.0, 2)]}
    summary = unit_summary(record)
    low, sums, count = summary["psnr"]["top"]
    assert (low, count, summary["assembled"]) == (29.5, 5, False)
    assert np.array_equal(sums, [100.0, 60.0]) and summary["sources"] is None
