"""Normalization stats: exact moments, quantiles within their certified bound, LeRobot parity,
files, and mixtures (jaxload.stats)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import jaxload.stats as S
from jaxload.converters.convert import convert
from jaxload.errors import DatasetError
from jaxload.stats import quantiles as Q
from jaxload.stats import stream

pytestmark = pytest.mark.integration

SHARED = ("tabular_only", "h264_single", "av1_multi")
QS = list(S.QUANTILES.values())


def _converted(tmp_path_factory, src: Path, name: str | None = None, **kwargs) -> Path:
    """A conversion of `src`, shared by every test module of this session."""
    out = tmp_path_factory.getbasetemp() / "converted" / (name or src.name)
    if not out.exists():
        out.parent.mkdir(exist_ok=True)
        convert(src, out, workers=1, progress=False, **kwargs)
    return out


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


@pytest.fixture(scope="module")
def shared(shared_lerobot, tmp_path_factory):
    return {n: _converted(tmp_path_factory, shared_lerobot / n) for n in SHARED}


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


def test_the_bound_holds_when_narrowing_is_cut_short(monkeypatch):
    # With one narrowing pass and no exact collection, quantiles are interval midpoints:
    # the reported bound must still cover the exact quantile, and stay below the a-priori
    # worst case (max - min) / (2 NUM_BINS NUM_SUB_BINS).
    monkeypatch.setattr(Q, "MAX_REFINE_PASSES", 1)
    monkeypatch.setattr(Q, "COLLECT", 0)
    x = _hard_data(seed=1)
    s = _stream(x)
    _assert_quantiles_within_bound(s, x)
    worst = (x.max(0) - x.min(0)) / (2 * Q.NUM_BINS * Q.NUM_SUB_BINS)
    for e in s.quantile_error.values():
        assert (e <= worst * (1 + 1e-9)).all()
    assert max(e.max() for e in s.quantile_error.values()) > 0  # the inexact path ran


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


def test_write_stats_lerobot_structure_image_stats_copied_and_round_trip(
    shared, shared_lerobot, tmp_path
):
    root = tmp_path / "ds"
    shutil.copytree(shared["h264_single"], root)
    (root / "meta" / "stats.json").unlink()
    source_stats = shared_lerobot / "h264_single" / "meta" / "stats.json"
    S.write_stats(root, source_stats)

    written = json.loads((root / "meta" / "stats.json").read_text())
    lerobot = json.loads(source_stats.read_text())
    assert set(written) == set(lerobot)  # the same features, cameras included
    for key, entry in written.items():
        assert list(entry) == list(S.STAT_ORDER)  # LeRobot's stats and order
        for stat, value in entry.items():
            assert np.shape(value) == np.shape(lerobot[key][stat]), (key, stat)
    assert written["observation.image"] == {
        k: lerobot["observation.image"][k] for k in S.STAT_ORDER
    }  # copied per channel, (3, 1, 1)
    assert not [p for p in (root / "meta").iterdir() if p.name.endswith(".tmp")]

    loaded = S.load_stats(root)
    fresh = S.compute_stats(root)
    for key, s in fresh.items():
        np.testing.assert_array_equal(loaded[key].mean, s.mean)
        np.testing.assert_array_equal(loaded[key].quantiles["q99"], s.quantiles["q99"])
        assert loaded[key].grids and loaded[key].quantile_error is not None
    assert not loaded["observation.image"].grids  # copied: no sketch


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


def test_source_stats_as_bytes_or_dict(shared, shared_lerobot, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(shared["h264_single"], root)
    raw = (shared_lerobot / "h264_single" / "meta" / "stats.json").read_bytes()
    from_bytes = S.write_stats(root, raw)  # what a remote source hands over
    from_dict = S.write_stats(root, json.loads(raw))
    np.testing.assert_array_equal(
        from_bytes["observation.image"].mean, from_dict["observation.image"].mean
    )
    assert "observation.image" not in S.write_stats(root, None)  # no source stats
    assert "observation.image" not in S.write_stats(root, tmp_path / "missing.json")
    with pytest.raises(DatasetError, match=r"source stats\.json: unreadable"):
        S.write_stats(root, b"{oops")
