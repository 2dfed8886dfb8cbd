"""`OpenSlots` (jaxload.stages.open_slots): the workers' batches opened in the training
process as plain ndarrays without copies: camera arrays from their slots, GOPs sent for
the devices from theirs, other arrays as plain views. Here in one process: ReadBatch
writes into a fresh slot pool (unlinked after the test) as a worker would."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxload import PipelineOptions
from jaxload.decode.frames import EncodedFrames
from jaxload.stages.open_slots import OpenSlots
from jaxload.stages.read_batch import ReadBatch
from jaxload.workers import shared_batch
from tests.decode.test_nvdec import two_camera_dataset
from tests.support.fake_dataset import FakeDataset
from tests.support.specs import loader_spec


def _worker_and_plain(spec, datasets, k=0):
    """(batch k as a worker sends it, batch k read in this process)."""
    worker = ReadBatch(spec, datasets, 0)
    worker.output_to_shared_memory = True
    return worker.map(k), ReadBatch(spec, datasets, 0).map(k)


def test_a_workers_batch_opens_to_the_same_plain_arrays(pool):
    spec, datasets = loader_spec(FakeDataset([5, 7, 3]), global_batch_size=4, seed=2)
    sent, want = _worker_and_plain(spec, datasets, k=1)
    assert isinstance(sent["observation.images.top"], shared_batch.SlotRef)
    opened = OpenSlots().map(sent)
    assert opened.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            assert type(opened[key]) is np.ndarray, key  # no subclass reaches the user
            np.testing.assert_array_equal(opened[key], value)
        else:
            assert opened[key] == value  # strings pass as they are


class _GrainShared(np.ndarray):
    """An ndarray subclass as Grain's shared-memory arrays are."""


def test_other_arrays_become_plain_views_without_a_copy():
    shared = np.arange(12, dtype=np.float32).reshape(3, 4).view(_GrainShared)
    out = OpenSlots().map({"observation.state": shared, "task": ["a", "b", "c"]})
    assert type(out["observation.state"]) is np.ndarray
    assert np.shares_memory(out["observation.state"], shared)
    assert out["task"] == ["a", "b", "c"]


@pytest.fixture(scope="module")
def video_dataset(tmp_path_factory):
    return two_camera_dataset(tmp_path_factory.mktemp("open_slots"))


def test_gops_for_the_devices_open_as_views_of_their_slot(pool, video_dataset):
    sharding = NamedSharding(jax.make_mesh((1,), ("data",)), P("data"))
    spec, datasets = loader_spec(
        video_dataset,
        global_batch_size=4,
        sharding=sharding,
        host_index=None,
        host_count=None,
        options=PipelineOptions(num_workers=0, read_threads=1, decode_device="device"),
    )
    try:
        readers = spec.for_readers()
        sent, want = _worker_and_plain(readers, datasets)
        key = "observation.images.top"
        assert isinstance(sent[key].gops, shared_batch.PackedBytes)
        opened = OpenSlots().map(sent)[key]
        assert isinstance(opened, EncodedFrames)
        assert [bytes(g) for g in opened.gops] == [bytes(g) for g in want[key].gops]
        assert all(isinstance(g, memoryview) for g in opened.gops)
        np.testing.assert_array_equal(opened.frame_index, want[key].frame_index)
    finally:
        datasets.close()
