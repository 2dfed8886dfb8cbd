"""Merged stats of a mixture (jaxload.stats.sketch.merge_stats): equal to the stats of the
concatenated data, quantiles within their bound from the sketches, LeRobot's weighted
quantiles without them."""

import json

import numpy as np
import pytest

import jaxload.stats as S
from jaxload.converters.convert import convert
from tests.stats.test_stream import (
    _assert_quantiles_within_bound,
    _hard_data,
    _source_columns,
    _stream,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def halves(shared_lerobot, tmp_path_factory):
    """tabular_only converted as two datasets (episodes 0-9 and 10-19) and as one."""
    src = shared_lerobot / "tabular_only"
    root = tmp_path_factory.mktemp("halves")
    for name, episodes in (("a", "0-9"), ("b", "10-19")):
        convert(src, root / name, episodes=episodes, workers=1, progress=False)
        S.write_stats(root / name)
    return root / "a", root / "b", _source_columns(src)


def test_merged_stats_of_a_mixture_equal_stats_of_the_concatenated_data(halves):
    a, b, columns = halves
    merged = S.merge_stats([S.load_stats(a), S.load_stats(b)])
    together = S.compute_stats([a, b])
    for key, m in merged.items():
        x = columns[key]
        assert m.count == len(x) == together[key].count
        np.testing.assert_allclose(m.mean.reshape(-1), x.mean(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(m.std.reshape(-1), x.std(0), rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(m.min.reshape(-1), x.min(0))
        np.testing.assert_array_equal(m.max.reshape(-1), x.max(0))
        np.testing.assert_allclose(m.mean, together[key].mean, rtol=1e-12, atol=1e-12)
        _assert_quantiles_within_bound(m, x)  # from the sketches, within their bound
        _assert_quantiles_within_bound(together[key], x)  # streamed over both: exact
    state = merged["observation.state"]
    # The quantile-shaped sketch keeps the merge bound small next to the spread.
    spread = (state.quantiles["q99"] - state.quantiles["q01"]).reshape(-1)
    assert (state.quantile_error["q50"].reshape(-1) <= 0.01 * spread).all()


def test_merged_quantiles_of_hard_data_stay_within_their_bound():
    x = _hard_data(seed=3)
    parts = [_stream(x[:100_000]), _stream(x[100_000:250_000]), _stream(x[250_000:])]
    merged = S.merge_stats([{"x": p} for p in parts])["x"]
    _assert_quantiles_within_bound(merged, x)
    np.testing.assert_allclose(merged.mean, x.mean(0), rtol=1e-10)
    np.testing.assert_allclose(merged.std, x.std(0), rtol=1e-10)
    # The glitch (1e9 among N(0, 1)) widens only the tail bins: q50 stays sharp.
    assert merged.quantile_error["q50"][1] < 0.01


def test_merge_without_sketches_falls_back_to_lerobots_weighted_quantiles(shared_lerobot, caplog):
    raw = json.loads((shared_lerobot / "h264_single" / "meta" / "stats.json").read_text())
    image = S.FeatureStats.from_json(raw["observation.image"])
    merged = S.merge_stats([{"img": image}, {"img": image}])["img"]
    assert merged.count == 2 * image.count and merged.quantile_error is None
    np.testing.assert_allclose(merged.quantiles["q50"], image.quantiles["q50"])
    np.testing.assert_allclose(merged.std, image.std)
    assert "no quantile sketch" in caplog.text
