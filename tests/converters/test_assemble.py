"""converters/assemble.py: finished units' parts assembled into sealed shards in plan
order, each shard checkpointed and the parts it used deleted; a damaged part is dropped
with its record (its unit runs again), a checkpoint whose shard is gone is forgotten with
the units it held, and fidelity is the min and exact mean over every frame."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxload import format as fmt
from jaxload.converters.assemble import assemble, fidelity, reconcile
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.converters.options import encode_options
from jaxload.converters.partial import JobState
from jaxload.converters.plan import Unit
from jaxload.converters.units import UnitContext, convert_unit
from jaxload.errors import JaxloadError
from jaxload.format.shards import open_shard
from tests.converters.conftest import source_features

CAMERA = "observation.images.top"
KEY = 12345
UNITS = [Unit(0, (0,), 5, 5.0, 0), Unit(1, (1,), 3, 3.0, 0)]


@pytest.fixture
def state(small_v3, tmp_path):
    """Both units of small_v3 converted and recorded in a job's partial directory."""
    root = tmp_path / ".out.partial"
    root.mkdir()
    state = JobState.open(root, {"units": [[0], [1]]})
    source = LeRobotV3Source(small_v3)
    options = encode_options(None, None, None, None, None)
    context = UnitContext(source, options, source_features(source), str(state.tmp_dir), "j")
    for unit in UNITS:
        state.record_unit(convert_unit(context, unit))
    return state


def test_units_become_sealed_shards_checkpointed_and_their_parts_go(state):
    done = state.done_units()
    assembled = assemble(state, UNITS, done, [CAMERA], shard_bytes=1, records_key=KEY)
    assert assembled.num_shards == 2  # a shard per episode at 1 byte: never split
    rows = list(assembled.rows())
    assert [(r["episode_index"], r["shard"], r["frames_record_start"]) for r in rows] == [
        (0, 0, 0),
        (1, 1, 0),
    ]
    assert rows[0][fmt.segment_column(CAMERA, "record_start")] == 1
    assert [c["stop"] for c in state.shard_checkpoints()] == [1, 2]
    assert not state.part_path(0).exists() and all(r["assembled"] for r in done.values())
    assert assembled.shard_records == tuple(c["records"] for c in state.shard_checkpoints())
    reader = open_shard(state.dataset_dir / fmt.shard_path(1))
    stored = reader.read([0])[0]
    reader.close()
    assert fmt.unseal_record(stored, KEY, 1, 0) is not None  # sealed with the content key
    # a rerun finds every shard checkpointed: nothing to write, the same rows
    again = assemble(state, UNITS, state.done_units(), [CAMERA], 1, KEY)
    assert list(again.rows()) == rows
    with pytest.raises(JaxloadError, match="sealed for other content"):
        assemble(state, UNITS, state.done_units(), [CAMERA], 1, KEY + 1)


def test_a_damaged_part_is_dropped_so_its_unit_runs_again(state):
    part = state.part_path(1)
    data = part.read_bytes()
    part.write_bytes(data[:200] + bytes(b ^ 0xFF for b in data[200:600]) + data[600:])
    with pytest.raises(
        JaxloadError, match=r"unit-00001\.array_record: unreadable .*rerun the command"
    ):
        assemble(state, UNITS, state.done_units(), [CAMERA], 1, KEY)
    assert not part.exists() and not state.unit_record_path(1).exists()
    assert list(state.done_units()) == [0]  # assembled into shard 0 before the failure
    assert not list(state.dataset_dir.glob("**/*.tmp"))


def test_reconcile_forgets_checkpoints_whose_shard_is_gone(state):
    assemble(state, UNITS, state.done_units(), [CAMERA], 1, KEY)
    (state.dataset_dir / fmt.shard_path(1)).unlink()
    reconcile(state, UNITS)
    assert [c["shard"] for c in state.shard_checkpoints()] == [0]
    assert list(state.done_units()) == [0]  # unit 1's records were only in shard 1


def test_fidelity_is_the_worst_frame_and_the_mean_over_frames():
    records = {
        0: {"psnr": {"c": (30.0, np.array([100.0, 40.0]), 4)}},
        1: {"psnr": {"c": (35.0, np.array([70.0]), 2)}},
    }
    assert fidelity(records, ["c"]) == {"c": (30.0, 35.0)}
    lossless = {0: {"psnr": {"c": (math.inf, np.array([math.inf]), 3)}}}
    assert fidelity(lossless, ["c"]) == {"c": (math.inf, math.inf)}


def test_records_that_differ_from_their_units_digest_are_not_sealed(state):
    import json

    path = state.unit_record_path(1)
    record = json.loads(path.read_text())
    record["episodes"][0]["payload_sha256"] = "0" * 64
    path.write_text(json.dumps(record))
    with pytest.raises(
        JaxloadError, match="episode 1's records differ from the digest its unit recorded"
    ):
        assemble(state, UNITS, state.done_units(), [CAMERA], 1, KEY)
    assert not state.part_path(1).exists()
