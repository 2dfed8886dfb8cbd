"""meta/stats.json and its sketch (jaxload.stats.store): LeRobot's structure, image stats
copied from the source, a round trip, source stats as bytes or a dict."""

import json
import shutil

import numpy as np
import pytest

import jaxload.stats as S
from jaxload.errors import DatasetError

pytestmark = pytest.mark.integration


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
