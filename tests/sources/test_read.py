"""What a loader reads, resolved (jaxload.sources.read): this host's rows of each global
batch as stream positions, and the batches left in a finite stream."""

from __future__ import annotations

import numpy as np

from jaxload.resolution.request import LoaderRequest
from jaxload.resolution.resolve import resolve_read
from jaxload.sources.read import HostBatches
from tests.support.fake_dataset import FakeDataset


def _read(**kwargs):
    kwargs.setdefault("host_index", 0)
    kwargs.setdefault("host_count", 1)
    return resolve_read(LoaderRequest(FakeDataset([5, 5]), global_batch_size=4, **kwargs))


def test_batch_k_after_a_start_is_this_hosts_rows_of_it():
    read = _read(host_index=1, host_count=2)
    assert read.positions(0, 0).tolist() == [2, 3]
    assert read.positions(0, 3).tolist() == [14, 15]
    assert read.positions(6, 1).tolist() == [12, 13]  # resumed at 6: batch 1 starts at 10
    assert read.positions(np.int64(6), np.int32(1)).dtype == np.int64


def test_batches_left_in_a_finite_stream_drop_the_last_incomplete_one():
    read = _read(num_epochs=3)  # 3 epochs of 10 samples, batches of 4
    assert [read.num_batches(p) for p in (0, 4, 26, 27, 30, 40)] == [7, 6, 1, 0, 0, 0]
    assert _read().num_batches(0) is None  # repeats for ever


def test_any_spec_with_a_stream_rows_and_epochs_says_its_batches():
    class Spec(HostBatches):
        stream, global_batch_size = _read().stream, 2
        rows, num_epochs = np.array([1]), 1

    assert Spec().positions(0, 2).tolist() == [5] and Spec().num_batches(0) == 5
