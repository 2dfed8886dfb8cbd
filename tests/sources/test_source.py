"""What a loader reads: DatasetSource and make_loader's shorthands for it."""

import numpy as np
import pytest

import jaxload
from jaxload import DatasetSource, PipelineOptions
from jaxload.converters.convert import convert
from jaxload.sources.source import as_sources
from tests.support.lerobot_factory import write_lerobot_v3


@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    out = []
    for name, lengths in (("a", (5, 6, 7, 8)), ("b", (4, 4, 9))):
        src = write_lerobot_v3(root / f"src_{name}", episode_lengths=lengths, cameras={})
        convert(src, root / name, workers=1, progress=False)
        out.append(root / name)
    return out


def test_episode_selections_per_dataset_of_any_iterable_type():
    # numpy arrays (and ranges, tuples) are one selection per dataset, never one flat list.
    for per in ([np.array([0, 1]), np.array([2, 3])], [range(2), (2, 3)], [[0, 1], [2, 3]]):
        a, b = as_sources(["x", "y"], episodes=per)
        assert (a.episodes, b.episodes) == ([0, 1], [2, 3])


def test_a_flat_selection_is_shared_and_mixed_forms_are_refused():
    a, b = as_sources(["x", "y"], episodes=np.array([1, 2]))
    assert a.episodes == b.episodes == [1, 2]
    with pytest.raises(ValueError, match="mixes episode indices"):
        as_sources(["x", "y"], episodes=[0, [1, 2]])
    with pytest.raises(ValueError, match="3 selections for 2 datasets"):
        as_sources(["x", "y"], episodes=[[0], [1], [2]])
    with pytest.raises(ValueError, match="must be integers"):
        DatasetSource("x", episodes=[0.5])


def test_a_field_set_twice_is_an_error():
    with pytest.raises(ValueError, match="weight set both"):
        as_sources([DatasetSource("x", weight=1.0), "y"], weights=[1.0, 2.0])


def test_make_loader_serves_each_datasets_own_episodes(two_datasets):
    a, b = two_datasets
    kw = dict(global_batch_size=4, num_epochs=1, shuffle=False, host_index=0, host_count=1)
    by_shorthand = jaxload.make_loader(
        [a, b], episodes=[np.array([0, 1]), np.array([2])], options=PipelineOptions(0), **kw
    )
    by_source = jaxload.make_loader(
        [DatasetSource(a, episodes=[0, 1]), DatasetSource(b, episodes=[2])],
        options=PipelineOptions(num_workers=0),
        **kw,
    )
    for loader in (by_shorthand, by_source):
        with loader:
            batches = list(loader)
        served = {
            (int(d), int(e))
            for batch in batches
            for d, e in zip(batch["dataset_index"], batch["episode_index"], strict=True)
        }
        assert served == {(0, 0), (0, 1), (1, 2)}
        assert loader.epoch_size == 5 + 6 + 9


def test_pipeline_options_are_checked():
    with pytest.raises(ValueError, match="num_workers must be an integer >= 0"):
        PipelineOptions(num_workers=-1)
    with pytest.raises(ValueError, match="choose one of"):
        PipelineOptions(decode_device="gpu")
    resolved = PipelineOptions(num_workers=1, prefetch=4).resolve()
    assert (resolved.num_workers, resolved.read_threads, resolved.prefetch) == (1, 2, 4)


def test_deprecated_shorthands_warn_and_never_mix_with_options(tmp_path):
    from tests.support.fake_dataset import FakeDataset

    ds = FakeDataset([5, 7])
    with pytest.warns(DeprecationWarning, match=r"make_loader\(num_workers=0\).*options="):
        loader = jaxload.make_loader(
            ds, global_batch_size=4, num_workers=0, host_count=1, host_index=0
        )
    assert loader.options.num_workers == 0
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="inside `options`"):
        jaxload.make_loader(
            ds, global_batch_size=4, prefetch=3, options=PipelineOptions(num_workers=0)
        )
    # decode_device (the stable contract's keyword) sets the option unless it names another.
    with pytest.raises(ValueError, match="name the device once"):
        jaxload.make_loader(
            ds, global_batch_size=4, decode_device="cpu",
            options=PipelineOptions(decode_device="cuda"),
        )  # fmt: skip
