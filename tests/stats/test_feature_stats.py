"""One feature's statistics (jaxload.stats.feature_stats.FeatureStats): stats.json entries
read (LeRobot's without quantiles too) and written in LeRobot's order, and stats a batch
cannot be normalized with refused naming where they come from."""

import numpy as np
import pytest

from jaxload.errors import DatasetError
from jaxload.stats import FeatureStats
from jaxload.stats.feature_stats import STAT_ORDER

ENTRY = {
    "min": [0.0, -1.0],
    "max": [2.0, 1.0],
    "mean": [1.0, 0.0],
    "std": [0.5, 0.25],
    "count": [40],
    "q01": [0.1, -0.9],
    "q99": [1.9, 0.9],
}


def test_an_entry_reads_and_writes_back_in_lerobots_order():
    stats = FeatureStats.from_json(ENTRY)
    assert stats.count == 40 and stats.shape == (2,)
    assert stats.get("count").tolist() == [40] and stats.get("q99").tolist() == [1.9, 0.9]
    out = stats.to_json()
    assert out == ENTRY and list(out) == [n for n in STAT_ORDER if n in ENTRY]
    image = FeatureStats.from_json(
        {k: np.full((3, 1, 1), 0.5).tolist() for k in ("min", "max", "mean", "std")}
        | {"count": [7]}
    )  # LeRobot's image stats: no quantiles, per channel
    assert image.shape == (3, 1, 1) and image.quantiles == {}
    assert list(image.to_json()) == ["min", "max", "mean", "std", "count"]


@pytest.mark.parametrize(
    "raw, said",
    [
        ({k: v for k, v in ENTRY.items() if k != "std"}, "KeyError: 'std'"),
        (ENTRY | {"max": [1.0, 2.0, 3.0]}, "ValueError"),
        (ENTRY | {"count": "many"}, "ValueError"),
        (ENTRY | {"mean": None}, "ValueError: cannot reshape"),  # mean None: shape ()
        (ENTRY | {"count": None}, "TypeError"),
    ],
)
def test_a_malformed_entry_is_refused_naming_where(raw, said):
    with pytest.raises(
        DatasetError, match=rf"out/ds meta/stats.json\['action'\]: malformed stats entry \({said}"
    ):
        FeatureStats.from_json(raw, "out/ds meta/stats.json['action']")


def test_check_refuses_non_finite_negative_or_misshapen_stats():
    FeatureStats.from_json(ENTRY).check("ds: action", (2,))
    with pytest.raises(
        DatasetError,
        match=r"ds: action: stats of shape \(2,\), but the feature's stats have shape \(3,\)",
    ):
        FeatureStats.from_json(ENTRY).check("ds: action", (3,))
    with pytest.raises(DatasetError, match=r"ds: action: std is not finite \(\[nan, 0.25\]\)"):
        FeatureStats.from_json(ENTRY | {"std": [float("nan"), 0.25]}).check("ds: action")
    with pytest.raises(DatasetError, match=r"ds: action: q99 is not finite"):
        FeatureStats.from_json(ENTRY | {"q99": [float("inf"), 0.9]}).check("ds: action")
    with pytest.raises(DatasetError, match=r"ds: action: std is negative \(\[-0.5, 0.25\]\)"):
        FeatureStats.from_json(ENTRY | {"std": [-0.5, 0.25]}).check("ds: action")
