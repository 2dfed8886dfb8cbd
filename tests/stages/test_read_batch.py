"""The read stage built from a spec (tests/support/specs.py), without make_loader: batch k
is this host's rows of global positions [k*G, (k+1)*G), each the dataset's own sample."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from jaxload.stages.read_batch import ReadBatch
from tests.support.fake_dataset import FakeDataset, add_state_sum
from tests.support.specs import loader_spec


def _positions(spec, k):
    return spec.stream.locate(spec.positions(0, k))


def test_a_batch_holds_each_rows_own_sample_in_stream_order():
    ds = FakeDataset([5, 7, 3], delta_timestamps={"action": [0.0, 0.1, 0.2]})
    spec, datasets = loader_spec(ds, global_batch_size=4, seed=2)
    read = ReadBatch(spec, datasets, 0)
    for k in range(3):
        batch = read.map(k)
        _, positions = _positions(spec, k)
        want = [ds[int(p)] for p in positions]
        for key in ("observation.state", "action", "action_is_pad", "index"):
            np.testing.assert_array_equal(batch[key], np.stack([w[key] for w in want]))
        cams = np.stack([w["observation.images.top"] for w in want])
        np.testing.assert_array_equal(batch["observation.images.top"], cams)


def test_a_later_start_reads_the_same_rows_as_the_batches_it_skips():
    spec, datasets = loader_spec(FakeDataset([6, 9]), global_batch_size=3, seed=1)
    whole = ReadBatch(spec, datasets, 0).map(2)
    resumed = ReadBatch(spec, datasets, 6).map(0)  # position 6 = batch 2
    for key in whole:
        np.testing.assert_array_equal(whole[key], resumed[key])


def test_two_hosts_read_disjoint_halves_of_each_global_batch():
    ds = FakeDataset([8, 8])
    parts = []
    for host in range(2):
        spec, datasets = loader_spec(ds, global_batch_size=4, host_index=host, host_count=2)
        parts.append(ReadBatch(spec, datasets, 0).map(1)["index"])
    one, datasets = loader_spec(ds, global_batch_size=4)
    np.testing.assert_array_equal(
        np.concatenate(parts), ReadBatch(one, datasets, 0).map(1)["index"]
    )


def test_batch_transforms_run_in_the_read_stage():
    spec, datasets = loader_spec(
        FakeDataset([5]), global_batch_size=2, batch_transform=add_state_sum
    )
    batch = ReadBatch(spec, datasets, 0).map(0)
    np.testing.assert_allclose(batch["state_sum"], batch["observation.state"].sum(-1))


def test_the_spec_is_a_value_equal_by_what_it_defines_and_small_to_pickle():
    ds = FakeDataset([40] * 50, cameras={"observation.images.top": (48, 64, 3)})
    a, datasets = loader_spec(ds, global_batch_size=4, seed=0)
    b, _ = loader_spec(ds, global_batch_size=4, seed=0)
    assert a == b and hash(a) == hash(b)
    assert a != loader_spec(ds, global_batch_size=4, seed=1)[0]
    assert a != loader_spec(ds, global_batch_size=8, seed=0)[0]
    again = pickle.loads(pickle.dumps(a))
    assert again == a
    # No opened dataset inside (a pickled instance names its class's module).
    pickled = pickle.dumps(a).decode("latin-1")
    assert "fake_dataset" not in pickled and "episode_dataset" not in pickled
    assert "fake_dataset" in pickle.dumps(datasets.datasets).decode("latin-1")


def test_a_dataset_that_is_not_a_dataset_is_refused_by_name():
    with pytest.raises(ValueError, match="at least one dataset"):
        loader_spec([], global_batch_size=2)
