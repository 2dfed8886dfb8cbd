"""`SharedMemoryOutput` (jaxload.stages.shared_memory_output): a pass-through stage that,
when Grain enables shared-memory output in a worker, makes ReadBatch build its camera
arrays in shared-memory slots and send references. Here in one process: the stage is
what Grain's `mp_prefetch` finds; the slot pool is a fresh one, unlinked after the test."""

from __future__ import annotations

import grain
import numpy as np

from jaxload.stages.read_batch import ReadBatch
from jaxload.stages.shared_memory_output import SharedMemoryOutput
from jaxload.workers import shared_batch
from tests.support.fake_dataset import FakeDataset
from tests.support.specs import loader_spec


def _stage():
    spec, datasets = loader_spec(FakeDataset([5, 7, 3]), global_batch_size=4, seed=2)
    read_batch = ReadBatch(spec, datasets, 0)
    parent = grain.MapDataset.range(3).map(read_batch).to_iter_dataset()
    return SharedMemoryOutput(parent, read_batch), read_batch, spec, datasets


def test_it_passes_its_parents_batches_through():
    stage, read_batch, spec, datasets = _stage()
    got = list(stage)
    want = [ReadBatch(spec, datasets, 0).map(k) for k in range(3)]
    assert not read_batch.output_to_shared_memory
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for key in w:
            np.testing.assert_array_equal(g[key], w[key])


def test_enabled_the_readers_send_cameras_as_slot_references(pool):
    stage, read_batch, spec, datasets = _stage()
    stage.enable_shared_memory_output()  # what Grain calls in each worker
    assert read_batch.output_to_shared_memory
    batch = next(iter(stage))
    ref = batch["observation.images.top"]
    assert isinstance(ref, shared_batch.SlotRef) and ref.shape == (4, 6, 8, 3)
    assert isinstance(batch["observation.state"], np.ndarray)  # the rest as Grain sends it
    opened = shared_batch.SlotOpener().open(ref)
    want = ReadBatch(spec, datasets, 0).map(0)["observation.images.top"]
    np.testing.assert_array_equal(opened, want)
