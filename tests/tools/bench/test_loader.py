"""jaxload's loader, measured (jaxload.tools.bench.loader): the positions of what it served,
and a steady-state measurement with the settings it was given."""

import numpy as np
import pytest

import jaxload
from jaxload.tools.bench.loader import measure_jaxload, positions_of
from tests.support.fake_dataset import FakeDataset


def test_positions_of_episode_and_frame_pairs():
    ds = FakeDataset([3, 5, 2], episode_index=[4, 7, 9])  # ids with gaps: searched, not indexed
    positions = np.array([0, 2, 3, 7, 8, 9])
    samples = [ds[int(p)] for p in positions]
    episodes = np.array([s["episode_index"] for s in samples])
    frames = np.array([s["frame_index"] for s in samples])
    assert episodes.tolist() == [4, 4, 7, 7, 9, 9]
    assert positions_of(ds, episodes, frames).tolist() == positions.tolist()
    column = positions_of(ds, episodes[:, None], frames[:, None])  # a batch's (B, 1) columns
    assert column.tolist() == positions.tolist()


@pytest.mark.integration
def test_measure_jaxload_serves_and_reports_what_it_measured(small):
    _, path = small
    result, served = measure_jaxload(path, num_workers=0, batch_size=4, seconds=0.3,
                                     warmup_s=0.0, loader_kwargs={"prefetch": 1})  # fmt: skip
    assert result.name == "jaxload" and result.samples_per_s > 0 and result.num_workers == 0
    assert result.samples == 4 * len(served) and result.time_to_first_batch_s > 0
    assert result.details["loader_kwargs"] == {"read_threads": 2, "worker_buffer_size": 2,
                                               "prefetch": 1}  # fmt: skip
    ds = jaxload.open(path)
    assert result.details["frames_per_sample"] == 2 + len(ds.camera_keys) - 1  # 2 + 1 each
    # 0 workers: warm-up of prefetch + 2 batches; then what was served, all in the dataset
    assert result.warmup_batches >= 3
    assert all(len(b) == 4 and b.dtype == np.int64 for b in served)
    flat = np.concatenate(served)
    assert flat.min() >= 0 and flat.max() < len(ds) and len(np.unique(flat)) > 1
