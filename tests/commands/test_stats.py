"""commands/stats.py: `jaxload stats` tables, JSON and files, the asked-for keys, and the
table's labels and cells (names, RGB channels, missing quantiles)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from jaxload.cli import main
from jaxload.commands import stats
from jaxload.errors import DatasetError
from jaxload.stats.feature_stats import FeatureStats


def test_a_table_per_key_one_row_per_dimension(converted, capsys):
    assert main(["stats", str(converted), "--key", "action"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{converted}: normalization stats (meta/stats.json), 8 frames"
    assert lines[2] == "action  float32 [4], count 8"
    assert lines[3].split() == ["dim", "mean", "std", "min", "max", "q01", "q99"]
    assert len(lines) == 4 + 4  # header lines, then dims 0..3
    saved = json.loads((converted / "meta/stats.json").read_text())["action"]
    first = lines[4].split()  # labelled by the feature's names
    assert first[:2] == ["0", "joint_0"]
    assert [float(v) for v in first[2:]] == pytest.approx(
        [saved[c][0] for c in stats.COLUMNS], rel=1e-5
    )


def test_json_and_out_file(converted, tmp_path, capsys):
    assert main(["stats", str(converted), "--key", "action", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(printed) == ["action"] and printed["action"]["count"] == [8]
    out = tmp_path / "s.json"
    assert main(["stats", str(converted), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    written = json.loads(out.read_text())
    assert said == f"{converted}: stats of {len(written)} key(s) written to {out}\n"
    assert written["action"] == printed["action"]


def test_an_unknown_key_is_named_with_the_keys_there(converted):
    with pytest.raises(DatasetError, match=r"no stats for 'nope' \(has: .*action"):
        stats.load(converted, ["action", "nope"])


def _stat(shape, quantiles=("q01", "q99")):
    values = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    return FeatureStats(count=3, mean=values, std=values, min=values, max=values + 1,
                        quantiles={q: values for q in quantiles})  # fmt: skip


def test_labels_name_dimensions_channels_or_indices():
    features = {
        "joints": SimpleNamespace(names={"motors": ["x", "y"]}, dtype="float32", shape=(2,)),
        "grid": SimpleNamespace(names=None, dtype="float32", shape=(2, 2)),
    }
    info = SimpleNamespace(cameras={"cam": SimpleNamespace(height=4, width=6)}, features=features)
    assert stats._labels(info, "joints", (2,)) == ["0 x", "1 y"]
    assert stats._labels(info, "cam", (3, 1, 1)) == ["R", "G", "B"]
    assert stats._labels(info, "grid", (2, 2)) == ["0,0", "0,1", "1,0", "1,1"]
    assert stats._labels(info, "scalar", ()) == ["0"]
    lines = stats.table_lines("p", info, {"cam": _stat((3, 1, 1), quantiles=())})
    assert lines[2] == "cam  camera 4x6, per channel, count 3"
    assert lines[4].split() == ["R", "0", "0", "0", "1", "-", "-"]  # no quantiles copied


def test_compact_lines():
    assert stats.compact_lines({"a": _stat((3,))}) == ["a [3]: min 0, max 3, mean 0..2, std 0..2"]
    assert stats.compact_lines({"b": _stat((1,))}) == ["b [1]: min 0, max 1, mean 0, std 0"]
