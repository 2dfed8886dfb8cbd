"""make_loader's arguments resolved once, in phases (jaxload.resolution.resolve): what is
read (sources opened, stream, this host's rows), the options, the placement, one spec;
each phase on its own, without make_loader or a Loader."""

from __future__ import annotations

import numpy as np
import pytest

import jaxload.autotune
from jaxload.episode_dataset import OpenedDatasets
from jaxload.options import PipelineOptions
from jaxload.placement.decide import Placement
from jaxload.resolution import resolve as R
from jaxload.resolution.request import LoaderRequest
from tests.support.fake_dataset import FakeDataset
from tests.support.specs import loader_spec


def _named(name: str, lengths, **kwargs) -> FakeDataset:
    ds = FakeDataset(lengths, salt=name, **kwargs)
    ds.path = name  # an opened dataset's name is its path
    return ds


def _read(paths_or_datasets, **kwargs):
    kwargs.setdefault("global_batch_size", 4)
    kwargs.setdefault("host_index", 0)
    kwargs.setdefault("host_count", 1)
    return R.resolve_read(LoaderRequest(paths_or_datasets, **kwargs))


def test_the_read_phase_opens_each_source_and_takes_this_hosts_rows():
    a, b = _named("a", [5, 7]), _named("b", [4])
    read = _read([a, b], global_batch_size=4, host_index=1, host_count=2, weights=[3, 1],
                 mixture_block_size=4, num_epochs=2, key_maps=[{}, {"index": "frame"}])  # fmt: skip
    assert read.names == ("a", "b") and read.global_batch_size == 4
    assert read.rows.tolist() == [2, 3] and read.host_count == 2
    assert [s.weight for s in read.sources] == [3, 1]
    assert read.stream.mixture.quota.tolist() == [3, 1] and read.stream.epoch_size == 16
    assert read.key_maps == ({}, {"index": "frame"})
    assert read.num_epochs == 2 and read.num_batches(0) == 8  # 2 epochs of 16, batches of 4
    assert [d.episode_lengths.tolist() for d in read.datasets] == [[5, 7], [4]]


def test_drops_reach_the_stream_and_the_datasets_keep_their_own_windows():
    ds = _named("a", [6, 6], delta_timestamps={"action": [0.0, 0.1, 0.2]})
    read = _read(ds, drop_n_first_frames=1, drop_n_last_frames=2)
    assert read.stream.epoch_size == 6  # 3 anchors per episode of 6 after dropping 3
    # Every anchor is past the first frame and 2 before the last of its episode.
    _, positions = read.stream.locate(np.arange(6))
    samples = read.datasets[0].read(positions)[0]
    assert sorted(int(s["frame_index"]) for s in samples) == [1, 1, 2, 2, 3, 3]
    assert samples[0]["action"].shape == (3, 4)
    with pytest.raises(ValueError, match="apply when jaxload opens a path"):
        _read(ds, delta_frames={"action": range(3)})  # an opened dataset's windows are its own


def test_an_empty_episode_selection_is_refused_naming_the_source():
    with pytest.raises(ValueError, match=r"^b: no episodes to read \(an empty episode"):
        _read([_named("a", [5]), _named("b", [])])


@pytest.mark.parametrize(
    "weight, block",
    [(1e-9, None), (0.01, 10)],  # too small for any block (raised by the schedule); no slot
)
def test_a_dataset_whose_weight_gets_no_slot_is_named(weight, block):
    datasets = [_named("big", [50]), _named("tiny", [50])]
    kw = {} if block is None else {"mixture_block_size": block}
    with pytest.raises(ValueError, match=rf"mixture: tiny \(weight {weight:.3g}\) would get 0%"):
        _read(datasets, global_batch_size=2, weights=[1, weight], **kw)


def test_a_finite_stream_must_yield_a_batch():
    with pytest.raises(ValueError, match="global_batch_size 8 is larger than the 5 samples"):
        _read(_named("a", [5]), global_batch_size=8, num_epochs=1)


def test_the_options_phase_sets_every_count():
    read = _read(_named("a", [8]))
    options = R.resolve_options(read, PipelineOptions(num_workers=0), OpenedDatasets(read.datasets))
    assert (options.num_workers, options.read_threads) == (0, 2)  # a local dataset: no extra
    assert options.worker_buffer_size == 2 and options.prefetch == 2


def test_autotune_fills_what_was_left_unset_and_never_decodes_on_devices_without_sharding(
    monkeypatch,
):
    """Mocked: the recommendation of a host whose GPUs decode (no GPU here). Without
    `sharding` the devices that would decode are unknown, so the readers decode."""
    asked = {}

    def recommend(datasets, *, delta_timestamps, host_count, overrides):
        asked.update(windows=delta_timestamps, host_count=host_count, overrides=overrides)
        return {"decode_device": "auto", "read_threads": 3, "num_workers": 5, "not_an_option": 1}

    monkeypatch.setattr(jaxload.autotune, "tuned_loader_kwargs", recommend)
    read = _read(_named("a", [8]), host_count=1)
    given = PipelineOptions(autotune=True, num_workers=0)
    options = R.resolve_options(read, given, OpenedDatasets(read.datasets))
    assert asked == {"windows": None, "host_count": 1,
                     "overrides": {"num_workers": 0}}  # fmt: skip
    assert options.decode_device == "cpu" and options.read_threads == 3
    assert options.num_workers == 5  # the recommendation honours overrides, not resolve_options


def test_resolve_builds_one_spec_from_the_phases():
    a, b = _named("a", [5, 7]), _named("b", [6])
    spec, datasets = loader_spec([a, b], global_batch_size=4, seed=7, keys=["index", "task"])
    assert [d.name for d in datasets] == ["a", "b"]
    assert spec.names == ("a", "b") and spec.seed == 7 and spec.shuffle
    assert spec.placement == Placement(decode_device="cpu", source_transforms=(None, None))
    assert spec.keys.keys == ("index", "task")
    assert [e.tolist() for e in spec.episode_lengths] == [[5, 7], [6]]
    assert spec.dataset_fingerprints == (str(a.fingerprint), str(b.fingerprint))
    # Resolved again: the same value; another dataset content: another stream fingerprint.
    assert loader_spec([a, b], global_batch_size=4, seed=7, keys=["index", "task"])[0] == spec
    other = loader_spec([a, _named("c", [6])], global_batch_size=4, seed=7)[0]
    assert other.fingerprint != spec.fingerprint
    np.testing.assert_array_equal(spec.rows, np.arange(4))


def test_a_batch_that_cannot_fit_in_memory_is_refused_by_resolve():
    huge = _named("a", [50], cameras={"observation.images.top": (4096, 4096, 3)})
    with pytest.raises(
        ValueError, match=r"16384 rows take 768.00 GiB each; .* more than the .* GiB available here"
    ):
        loader_spec(huge, global_batch_size=2**14)
