"""The dataset seam (jaxload.episode_dataset): what a loader needs of a dataset, and the
one adapter that makes any other map-style dataset an `EpisodeDataset`."""

from __future__ import annotations

import numpy as np
import pytest

from jaxload.episode_dataset import (
    EpisodeDataset,
    MapDataset,
    as_episode_dataset,
    dataset_view,
    is_dataset,
)
from tests.support.fake_dataset import FakeDataset


class _Plain:
    """A map-style dataset with nothing but lengths and items (no batched read)."""

    def __init__(self):
        self.episode_lengths = [2, 3]

    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": np.array([i], np.float32), "cam": np.full((2, 2, 3), i, np.uint8)}


def test_any_map_style_dataset_is_wrapped_once_into_the_protocol():
    fake = FakeDataset([4, 6], delta_timestamps={"action": [0.0, 0.1]}, fps=10)
    ds = as_episode_dataset(fake)
    assert isinstance(ds, MapDataset) and isinstance(ds, EpisodeDataset)
    assert as_episode_dataset(ds) is ds  # wrapped once
    assert ds.window_frames["action"].tolist() == [0, 1]
    assert ds.fingerprint == fake.fingerprint and ds.video_cameras == {}
    samples, cameras = ds.read([3, 7])
    assert "observation.images.top" not in samples[0]  # cameras come apart, decoded
    np.testing.assert_array_equal(
        cameras["observation.images.top"][1], fake[7]["observation.images.top"]
    )
    np.testing.assert_array_equal(samples[0]["observation.state"], fake[3]["observation.state"])


def test_a_dataset_without_optional_attributes_gets_their_defaults():
    ds = as_episode_dataset(_Plain())
    assert ds.name == "_Plain" and ds.camera_keys == [] and ds.window_frames == {}
    assert ds.episode_index.tolist() == [0, 1]
    samples, cameras = ds.read([4])  # no __getitems__: one item at a time
    assert samples[0]["x"].tolist() == [4.0] and cameras == {}
    assert set(ds.element_spec()) == {"x", "cam"}


def test_what_is_not_a_dataset_is_refused_naming_what_is_missing():
    assert not is_dataset("out/demo") and not is_dataset([1, 2])
    with pytest.raises(TypeError, match="episode_lengths"):
        as_episode_dataset(object())


class _NoLengths(_Plain):
    """What a new user writes first: len and items, no episode_lengths. Iterating it runs
    `ds[i]` past the end (here an IndexError; a uint8 frame index overflowed in the trial)."""

    def __init__(self):
        self.items_read = 0

    def __getitem__(self, i):
        self.items_read += 1
        if i >= 5:
            raise IndexError(i)
        return super().__getitem__(i)


def test_make_loader_refuses_a_dataset_without_lengths_saying_what_it_needs():
    """Before, make_loader took it for a list of datasets: it iterated it and failed on the
    first sample ("expected str, bytes or os.PathLike object, not dict")."""
    import jaxload

    ds = _NoLengths()
    with pytest.raises(TypeError, match=r"_NoLengths is not a dataset.*episode_lengths.*Your own"):
        jaxload.make_loader(ds, global_batch_size=2, host_index=0, host_count=1)
    assert ds.items_read == 0  # never iterated


@pytest.mark.parametrize("lengths", [[2, 2], [2, 4], [0, 5]])
def test_episode_lengths_must_tile_the_frames(lengths):
    """Lengths adding up to less than len(ds) left frames unread; to more, the first batch
    raised a bare IndexError."""
    ds = _Plain()
    ds.episode_lengths = lengths
    with pytest.raises(
        ValueError,
        match=r"_Plain: episode_lengths must be positive and add up to len\(dataset\) = 5",
    ):
        as_episode_dataset(ds)


def test_a_view_names_content_episodes_and_windows_in_frames():
    a = as_episode_dataset(FakeDataset([4, 6], delta_timestamps={"action": [0.0, 0.1]}))
    b = as_episode_dataset(FakeDataset([4, 6], delta_timestamps={"action": [0.0, 0.2]}))
    va, vb = dataset_view(a), dataset_view(b)
    assert va["windows"] == {"action": [0, 1]} and vb["windows"] == {"action": [0, 2]}
    assert va["episodes"] == vb["episodes"] and va["num_episodes"] == 2
