"""The loader state in Orbax checkpoints (jaxload.checkpoint): the handler writes one JSON
file, reads it back as a state dict or into a loader, and names a checkpoint without one
or with a damaged one. (Exact and elastic resumes: tests/pipeline/test_checkpoint.py.)"""

from __future__ import annotations

import json

import numpy as np
import orbax.checkpoint as ocp
import pytest

from jaxload import PipelineOptions, make_loader
from jaxload.checkpoint import STATE_FILE, LoaderCheckpointHandler, LoaderRestore, LoaderSave
from jaxload.errors import CheckpointError
from tests.support.fake_dataset import FakeDataset


def _loader(seed=3):
    return make_loader(
        FakeDataset([4, 6, 5], delta_timestamps={"action": [0.0, 0.1]}, fps=10),
        global_batch_size=2,
        options=PipelineOptions(num_workers=0),
        host_index=0,
        host_count=1,
        seed=seed,
    )


def test_a_state_dict_saves_to_one_json_file_and_restores_as_a_dict(tmp_path):
    with _loader() as loader:
        next(loader)
        state = loader.get_state()
    with ocp.CheckpointManager(tmp_path) as mngr:
        mngr.save(5, args=ocp.args.Composite(loader=LoaderSave(state)))
        mngr.wait_until_finished()
    (path,) = tmp_path.glob(f"5/loader/{STATE_FILE}")
    assert json.loads(path.read_text()) == state
    with ocp.CheckpointManager(tmp_path) as mngr:
        restored = mngr.restore(5, args=ocp.args.Composite(loader=LoaderRestore()))["loader"]
    assert restored == state and restored["position"] == 2


def test_restoring_into_a_loader_continues_its_stream(tmp_path):
    handler = LoaderCheckpointHandler()
    with _loader() as first:
        next(first)
        handler.save(tmp_path, LoaderSave(first))  # the loader's state, taken now
        expected = next(first)
    with _loader() as second:
        assert handler.restore(tmp_path, LoaderRestore(second)) is second
        np.testing.assert_array_equal(next(second)["action"], expected["action"])


def test_a_state_saved_with_another_batch_size_restores_only_when_allowed(tmp_path):
    handler = LoaderCheckpointHandler()
    with _loader() as loader:
        state = dict(loader.get_state(), global_batch_size=4)
        handler.save(tmp_path, LoaderSave(state))
        with pytest.raises(CheckpointError, match="global_batch_size=4 but this loader has 2"):
            handler.restore(tmp_path, LoaderRestore(loader))
        with pytest.warns(UserWarning, match="global_batch_size=4"):
            handler.restore(tmp_path, LoaderRestore(loader, allow_global_batch_size_change=True))


def test_a_checkpoint_without_or_with_a_damaged_state_is_named(tmp_path):
    handler = LoaderCheckpointHandler()
    with pytest.raises(CheckpointError, match=rf"{tmp_path}/{STATE_FILE}: no loader state"):
        handler.restore(tmp_path)
    (tmp_path / STATE_FILE).write_text('{"format": "jaxload.loader_st')  # cut short
    with pytest.raises(CheckpointError, match=rf"{tmp_path}/{STATE_FILE}: not valid JSON"):
        handler.restore(tmp_path)


def test_only_the_primary_host_writes(tmp_path):
    LoaderCheckpointHandler(primary_host=1).save(tmp_path, LoaderSave({"position": 0}))
    assert not (tmp_path / STATE_FILE).exists()  # this process is host 0
    LoaderCheckpointHandler().save(tmp_path, LoaderSave({"position": 0}))
    assert json.loads((tmp_path / STATE_FILE).read_text()) == {"position": 0}
