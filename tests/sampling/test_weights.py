"""Mixture weights from the datasets' sizes (jaxload.sampling.weights): proportional,
temperature, cap, max share, multipliers, and the table."""

import numpy as np
import pytest

from jaxload.sampling.mixture import MixtureSchedule
from jaxload.sampling.weights import MixtureWeights, as_weight_rule, weights_table

SIZES = {"frames": [9000, 900, 90, 10], "episodes": [10, 10, 5, 1], "anchors": [8000, 800, 80, 8]}


def test_proportional_temperature_and_cap():
    w = MixtureWeights(by="frames").resolve(SIZES)
    assert np.allclose(w, np.array(SIZES["frames"]) / 10000)
    hot = MixtureWeights(by="frames", temperature=2).resolve(SIZES)
    assert np.allclose(hot, np.sqrt(SIZES["frames"]) / np.sqrt(SIZES["frames"]).sum())
    assert np.allclose(MixtureWeights(by="frames", temperature=1e9).resolve(SIZES), 0.25)
    capped = MixtureWeights(by="frames", cap=900).resolve(SIZES)
    assert np.allclose(capped, np.array([900, 900, 90, 10]) / 1900)
    assert np.allclose(MixtureWeights(by="episodes").resolve(SIZES), np.array([10, 10, 5, 1]) / 26)
    assert np.allclose(MixtureWeights(by="uniform").resolve(SIZES), 0.25)
    both = MixtureWeights(by="episodes").resolve(SIZES, multipliers=[0, 1, 2, 0])
    assert np.allclose(both, [0, 0.5, 0.5, 0])


def test_max_share_water_fills_and_stays_exact():
    w = MixtureWeights(by="frames", max_share=0.4).resolve(SIZES)
    assert w.max() <= 0.4 + 1e-12 and np.isclose(w.sum(), 1)
    # the first is capped; the second takes as much as it can, the rest in proportion
    assert np.isclose(w[0], 0.4) and np.isclose(w[1], 0.4)
    assert np.isclose(w[2] / w[3], 9)
    with pytest.raises(ValueError, match="cannot be met by 4 datasets"):
        MixtureWeights(by="frames", max_share=0.2).resolve(SIZES)
    quota = MixtureSchedule(w).quota
    assert quota.sum() > 0 and (quota / quota.sum() <= 0.4 + 1e-3).all()


def test_bad_rules_are_refused_and_strings_are_rules():
    for kw in ({"by": "bytes"}, {"temperature": 0}, {"cap": -1}, {"max_share": 1.5}):
        with pytest.raises(ValueError, match="MixtureWeights"):
            MixtureWeights(**kw)
    assert as_weight_rule("episodes") == MixtureWeights(by="episodes")
    assert as_weight_rule([1, 2]) is None
    with pytest.raises(ValueError, match="weight 0"):
        MixtureWeights().resolve(SIZES, multipliers=[0, 0, 0, 0])


def test_the_table_names_every_column():
    table = weights_table(["a", "b"], [100, 50], [2, 1], [90, 45], [2, 1], [0.7, 0.3])
    head, a, b = table.splitlines()
    assert head.split() == [
        "dataset",
        "episodes",
        "frames",
        "weight",
        "share",
        "of",
        "a",
        "batch",
        "epochs",
        "per",
        "1M",
    ]
    assert a.split() == ["a", "2", "100", "0.6667", "70.00%", f"{0.7e6 / 90:,.1f}"]
    assert b.split()[-2:] == ["30.00%", f"{0.3e6 / 45:,.1f}"]


def test_weights_whose_sum_overflows_are_still_their_ratio():
    """[1e308, 1e308] summed to inf: every share became 0 and locate() raised IndexError."""
    schedule = MixtureSchedule([1e308, 1e308], seed=0)
    assert (
        np.allclose(schedule.weights, [0.5, 0.5])
        and schedule.quota.tolist() == [schedule.block_size // 2] * 2
    )
    dataset, position = schedule.locate(np.arange(64))
    assert np.bincount(dataset).tolist() == [32, 32] and position.min() >= 0
    assert np.allclose(MixtureSchedule([1e308, 5e307], seed=0).weights, [2 / 3, 1 / 3])
    rule = MixtureWeights(by="frames")
    assert np.allclose(rule.resolve({"frames": [1e308, 1e308]}, [1e308, 1e308]), [0.5, 0.5])
    assert "50.0" in weights_table(["a", "b"], [1, 1], [1, 1], [1, 1], [1e308, 1e308], [0.5, 0.5])
