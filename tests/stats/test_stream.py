"""Normalization stats streamed over a dataset (jaxload.stats.stream): exact moments,
quantiles within their certified bound, LeRobot parity, dimension groups, non-finite values
named. Files: test_store.py; mixtures: test_sketch.py; the bound: test_quantiles.py."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import jaxload.stats as S
from jaxload.errors import DatasetError
from jaxload.stats import quantiles as Q
from jaxload.stats import stream

pytestmark = pytest.mark.integration

SHARED = ("tabular_only", "h264_single", "av1_multi")
QS = list(S.QUANTILES.values())


def _source_columns(src: Path) -> dict[str, np.ndarray]:
    """Every tabular column of a LeRobot source, float64 (frames, dims)."""
    files = sorted((src / "data").glob("*/*.parquet"))
    table = pq.read_table(files)
    return {
        name: np.asarray(table[name].to_pylist(), dtype=np.float64).reshape(table.num_rows, -1)
        for name in table.column_names
    }


def _assert_quantiles_within_bound(stats: S.FeatureStats, x: np.ndarray) -> None:
    for name, q in S.QUANTILES.items():
        exact = np.quantile(x, q, axis=0)
        err = np.abs(stats.quantiles[name].reshape(-1) - exact)
        bound = stats.quantile_error[name].reshape(-1)
        slack = 4 * np.finfo(np.float64).eps * np.abs(x).max(axis=0)  # numpy's own rounding
        assert (err <= bound + slack).all(), (name, err, bound)


@pytest.mark.parametrize("name", SHARED)
def test_moments_match_lerobot_stats_json(shared, shared_lerobot, name):
    src = shared_lerobot / name
    ours = S.compute_stats(shared[name])
    lerobot = json.loads((src / "meta" / "stats.json").read_text())
    columns = _source_columns(src)
    tabular = [k for k in lerobot if k in columns]
    assert tabular and set(tabular) <= set(ours)
    for key in tabular:
        s, ref = ours[key], lerobot[key]
        assert s.count == ref["count"][0] == len(columns[key])
        # Exact: float64 statistics of the stored (float32) values.
        np.testing.assert_allclose(s.mean.reshape(-1), columns[key].mean(0), rtol=1e-12, atol=0)
        np.testing.assert_allclose(s.std.reshape(-1), columns[key].std(0), rtol=1e-10, atol=0)
        for stat in ("mean", "std", "min", "max"):
            a = s.get(stat).reshape(-1)
            b = np.asarray(ref[stat], dtype=np.float64).reshape(-1)
            # 1e-5 relative. LeRobot averages each episode in float32, so a mean near 0
            # carries float32 rounding of the feature's scale (tabular_only's state[4]:
            # mean 2.9e-4 off by 5.8e-9, 2e-5 of itself, 1e-8 of its std): there the
            # relative error is taken against the std.
            scale = np.abs(b)
            if stat == "mean":
                scale = np.maximum(scale, np.asarray(ref["std"], np.float64).reshape(-1))
            assert (np.abs(a - b) <= 1e-5 * scale).all(), (key, stat, a, b)


@pytest.mark.parametrize("name", SHARED)
def test_quantiles_are_within_their_bound_of_exact_numpy_quantiles(shared, shared_lerobot, name):
    ours = S.compute_stats(shared[name])
    columns = _source_columns(shared_lerobot / name)
    for key, s in ours.items():
        _assert_quantiles_within_bound(s, columns[key])
        assert all((e == 0).all() for e in s.quantile_error.values())  # exact here


def _hard_data(n=300_000, seed=0):
    rng = np.random.default_rng(seed)
    x = np.stack(
        [
            rng.standard_cauchy(n),  # heavy tails
            rng.normal(size=n),
            np.round(rng.normal(size=n) * 3),  # heavy ties
            rng.lognormal(0, 3, size=n),  # skewed over many decades
            np.full(n, 7.0),  # constant
        ],
        axis=1,
    )
    x[5, 1] = 1e9  # one glitch
    return x.astype(np.float32).astype(np.float64)


def _stream(x, pieces=23):
    chunks = np.array_split(x, pieces)
    return S.stream_stats(lambda: ({"x": c} for c in chunks), {"x": (x.shape[1],)})["x"]


def test_streaming_quantiles_are_exact_on_hard_data():
    x = _hard_data()
    s = _stream(x)
    _assert_quantiles_within_bound(s, x)
    assert all((e == 0).all() for e in s.quantile_error.values())
    np.testing.assert_allclose(s.mean, x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(s.std, x.std(0), rtol=1e-10)
    assert (s.min == x.min(0)).all() and (s.max == x.max(0)).all() and s.count == len(x)


def test_wide_features_in_dimension_groups_give_the_same_stats(monkeypatch):
    x = np.random.default_rng(2).normal(size=(5000, 6)) * [1, 10, 100, 1, 1, 1]
    whole = _stream(x)
    monkeypatch.setattr(stream, "SKETCH_BUDGET_BYTES", 2 * 16 * Q.NUM_BINS)  # ~2 dims per group
    grouped = _stream(x)
    for name in S.QUANTILES:
        np.testing.assert_array_equal(whole.quantiles[name], grouped.quantiles[name])
    np.testing.assert_array_equal(whole.grids[0].counts, grouped.grids[0].counts)


def test_non_finite_values_name_where_they_are():
    x = np.zeros((10, 2))
    x[7, 1] = np.nan
    block = {"x": x, stream._WHERE: ("out/ds", np.arange(10) // 4)}
    with pytest.raises(DatasetError, match=r"out/ds: episode 1: feature 'x' has NaN"):
        S.stream_stats(lambda: iter([block]), {"x": (2,)})
