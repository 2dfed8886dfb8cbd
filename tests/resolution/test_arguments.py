"""make_loader's argument checks (jaxload.resolution.arguments): each refusal names the
argument and the rule, through make_loader on a real converted dataset and on the check
functions themselves; mixture shares that round to no slot are named."""

import math

import numpy as np
import pytest

from jaxload import DatasetSource, MixtureWeights, PipelineOptions, make_loader
from jaxload.resolution import arguments
from tests.pipeline.test_make_loader import _loader, tabular_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return tabular_dataset(tmp_path_factory)


@pytest.mark.parametrize(
    "argument, value, rule",
    [
        ("seed", 1.5, "seed must be an integer >= 0 and < 2\\*\\*64, got 1.5"),
        ("seed", -1, "seed must be an integer >= 0 and < 2\\*\\*64, got -1"),
        ("seed", 2**64, "seed must be an integer >= 0 and < 2\\*\\*64"),
        ("seed", True, "seed must be an integer"),
        ("global_batch_size", 2.5, "global_batch_size must be an integer >= 1, got 2.5"),
        ("global_batch_size", 0, "global_batch_size must be an integer >= 1, got 0"),
        ("num_epochs", 1.5, "num_epochs must be an integer >= 1"),
        ("drop_n_first_frames", -1, "drop_n_first_frames must be an integer >= 0"),
        ("drop_n_last_frames", 0.5, "drop_n_last_frames must be an integer >= 0"),
        ("mixture_block_size", 0, "mixture_block_size must be an integer >= 1"),
        ("num_workers", -1, "num_workers must be an integer >= 0"),
        ("host_count", 1.0, "host_count must be an integer >= 1"),
        ("batch_transform", "add", "batch_transform must be a callable"),
    ],
)
def test_nonsense_arguments_name_the_argument_and_the_rule(dataset, argument, value, rule):
    with pytest.raises(ValueError, match=rule):
        _loader(dataset, **{argument: value})


def test_a_global_batch_larger_than_the_finite_stream_is_an_error(dataset):
    with pytest.raises(ValueError, match=r"global_batch_size 32 is larger than the 26 samples"):
        _loader(dataset, global_batch_size=32, num_epochs=1)
    assert _loader(dataset, global_batch_size=26, num_epochs=1).num_batches == 1
    assert _loader(dataset, global_batch_size=32, num_epochs=2).num_batches == 1


def test_weights_must_be_finite_and_non_negative(dataset):
    for weight in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="weight must be a finite number >= 0"):
            _loader(dataset, weights=[weight])


def test_batches_that_cannot_fit_in_memory_are_refused_with_the_estimate():
    """global_batch_size=10**8 ran to 22 GB and the OOM killer; now make_loader refuses,
    saying how much the batches in flight would take and what is available."""
    import dataclasses

    from jaxload.resolution.arguments import check_fits_in_memory
    from tests.support.fake_dataset import FakeDataset

    loader = make_loader(
        FakeDataset([50, 70]),
        global_batch_size=8,
        host_index=0,
        host_count=1,
        options=PipelineOptions(num_workers=0, read_threads=2, prefetch=2),
    )
    spec = loader.spec
    row = sum(math.prod(s) * np.dtype(d).itemsize for s, d in spec.schema.element_spec.values())
    in_flight = 2 * 2 + 2 + 2 + 1  # read threads' buffers, the worker buffer, prefetch, in use
    check_fits_in_memory(spec, available=8 * row * in_flight)  # exactly fits
    huge = dataclasses.replace(spec, rows=np.arange(10**6), global_batch_size=10**6)
    with pytest.raises(ValueError, match=r"global_batch_size=1000000: .* GiB available"):
        check_fits_in_memory(huge, available=8 * row * in_flight)
    loader.close()


def test_check_arguments_takes_integers_in_range_and_leaves_optional_ones_unset():
    arguments.check_arguments(seed=np.uint64(2**64 - 1), global_batch_size=np.int32(3))
    arguments.check_arguments(num_epochs=None, host_index=None, host_count=None)
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0 and < 2\*\*64, got None"):
        arguments.check_arguments(seed=None)  # not optional
    with pytest.raises(ValueError, match=r"host_index must be an integer >= 0, got -1"):
        arguments.check_arguments(host_index=-1)


def test_a_finite_stream_must_hold_one_batch():
    arguments.check_yields_a_batch(epoch_size=10, num_epochs=None, global_batch_size=10**9)
    arguments.check_yields_a_batch(epoch_size=10, num_epochs=2, global_batch_size=20)
    with pytest.raises(
        ValueError, match=r"larger than the 20 samples of num_epochs=2 \(an epoch is 10"
    ):
        arguments.check_yields_a_batch(epoch_size=10, num_epochs=2, global_batch_size=21)


def test_source_weights_all_or_none():
    a, b = DatasetSource("out/a"), DatasetSource("out/b", weight=2)
    assert arguments.source_weights([a, DatasetSource("out/b")]) is None
    assert arguments.source_weights([DatasetSource("out/a", weight=1), b]) == [1.0, 2.0]
    with pytest.raises(ValueError, match="give every dataset of a mixture a weight, or none"):
        arguments.source_weights([a, b])
    with pytest.raises(ValueError, match=r"b: weight must be a finite number >= 0, got True"):
        arguments.source_weights(
            [DatasetSource("out/a", weight=1), DatasetSource("out/b", weight=True)]
        )


def test_rule_weights_multiply_the_rules_share_by_each_sources_weight():
    sizes = {"frames": [100, 300], "anchors": [90, 290], "episodes": [2, 6]}
    sources = [DatasetSource("out/a"), DatasetSource("out/b", weight=0.5)]
    np.testing.assert_allclose(
        arguments.rule_weights(MixtureWeights(by="frames"), sources, sizes),
        [100 / 250, 150 / 250],  # (frames x weight), normalized
    )
    with pytest.raises(ValueError, match=r"a: weight must be a finite number >= 0, got nan"):
        arguments.rule_weights(
            MixtureWeights(by="frames"),
            [DatasetSource("out/a", weight=math.nan), sources[1]],
            sizes,
        )


def test_a_dataset_meant_to_be_read_but_given_no_slot_is_named():
    sizes = {"frames": [100, 0], "anchors": [100, 0], "episodes": [1, 0]}
    sources = [DatasetSource("out/a"), DatasetSource("out/b"), DatasetSource("out/c", weight=0)]
    assert arguments.intended_weights(None, sources, sizes | {"frames": [1, 1, 1]}) == [
        True,
        True,
        False,
    ]
    by_frames = MixtureWeights(by="frames")
    assert arguments.intended_weights(by_frames, sources[:2], sizes) == [True, False]  # empty
    names = ["a", "b", "c"]
    arguments.check_shares(names, [True, True, False], [0.5, 0.5, 0.0], [3, 1, 0])
    arguments.check_shares(names, [True, True, True], None, None)  # one dataset: no quota
    with pytest.raises(
        ValueError,
        match=r"mixture: b \(weight 1e-06\) would get 0% of every batch.*a larger weight",
    ):
        arguments.check_shares(names, [True, True, False], [1.0, 1e-6, 0.0], [4, 0, 0])
    with pytest.raises(ValueError, match=r"mixture: a, b would get 0%.*MixtureWeights temperature"):
        arguments.check_shares(names[:2], [True, True], None, [0, 0], rule=by_frames)


def test_dataset_sizes_count_frames_anchors_after_the_drops_and_episodes():
    class Lengths:
        def __init__(self, lengths):
            self.episode_lengths = lengths

    sizes = arguments.dataset_sizes([Lengths([5, 2, 8]), Lengths([])], 1, 2)
    assert sizes == {"frames": [15, 0], "anchors": [2 + 0 + 5, 0], "episodes": [3, 0]}
