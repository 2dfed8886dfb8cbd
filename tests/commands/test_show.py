"""commands/show.py's own logic (the sheet itself: tests/tools/test_show.py): parsing
--frames and --resize, reading a sources file, the line that describes a row, and the
command on a converted dataset."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import numpy as np
import pytest

import jaxload
from jaxload.cli import main
from jaxload.commands import show
from jaxload.errors import JaxloadError


def test_window_takes_a_range_or_a_list():
    assert show.window("action=0:4") == ("action", [0, 1, 2, 3])
    assert show.window("observation.images.top=-4,-2,0") == ("observation.images.top", [-4, -2, 0])
    assert show.window("a=b=1") == ("a=b", [1])  # the last "=" splits
    for bad in ("action", "=0:2", "action=2:2", "action=x", "action=0:1:2"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected KEY=START:STOP"):
            show.window(bad)


def test_size_is_height_x_width():
    assert show.size("224x160") == (224, 160)
    assert show.size("2X3") == (2, 3)
    for bad in ("224", "0x4", "ax4", "-1x4"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected HEIGHTxWIDTH"):
            show.size(bad)


def test_sources_of_paths_or_a_sources_file(tmp_path):
    assert show.sources_of(["a", "b"]) == ["a", "b"]
    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"path": "out/a", "weight": 2.0}, {"path": "out/b"}]))
    a, b = show.sources_of([str(path)])
    assert isinstance(a, jaxload.DatasetSource) and (a.path, a.weight, b.path) == (
        "out/a",
        2.0,
        "out/b",
    )
    for text, message in (
        ("{", "cannot read the sources file"),
        ('{"path": "x"}', "expected a JSON list of objects"),
        ('[{"path": "x", "colour": 1}]', r"entry 0: unknown fields \['colour'\]"),
        ('[{"path": "x"}, {"weight": 1}]', "entry 1: no 'path'; fields are path, weight"),
    ):
        path.write_text(text)
        with pytest.raises(JaxloadError, match=rf"s\.json: {message}"):
            show.sources_of([str(path)])


def test_describe_names_the_row_and_what_is_padded_or_missing():
    cams = [
        SimpleNamespace(key="top", missing=False, is_pad=np.array([True, False, True])),
        SimpleNamespace(key="wrist", missing=True, is_pad=np.zeros(3, bool)),
        SimpleNamespace(key="side", missing=False, is_pad=np.zeros(3, bool)),
    ]
    series = [
        SimpleNamespace(
            key="action",
            step_is_pad=np.array([0, 0, 1, 1], bool),
            dim_is_pad=np.array([0, 1, 1], bool),
        ),
    ]
    row = SimpleNamespace(dataset="/data/out/arm", dataset_index=1, episode=4, frame=7,
                          cameras=cams, series=series)  # fmt: skip
    assert show.describe(row) == (
        "arm (dataset_index 1) episode 4 frame 7; top slots 0, 2 padded; wrist missing; "
        "action steps 2..3 padded; action dims 1..2 padded"
    )
    row.dataset, row.cameras, row.series = "", [], []
    assert show.describe(row) == "dataset 1 (dataset_index 1) episode 4 frame 7"


def test_fewer_than_one_sample_is_refused(converted, capsys):
    assert main(["show", str(converted), "--samples", "0"]) == 1
    assert "--samples 0: give at least 1" in capsys.readouterr().err
