"""The checks of meta/episodes.parquet against info.json (jaxload.format.episode_checks):
the columns of a real conversion pass; each corruption the module exists for fails, naming
the file and the first bad episode."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jaxload.errors import DatasetError
from jaxload.format.episode_checks import (
    check_gops,
    check_record_layout,
    check_table,
    first_untiled,
)
from jaxload.format.reader import DatasetFiles
from tests.format.conftest import CAM, LENGTHS

PATH = "ds/meta/episodes.parquet"


@pytest.fixture(scope="module")
def table(camera_converted):
    """(info, columns, GOP counts) of the conversion, as episodes.py passes them."""
    files = DatasetFiles(camera_converted, check_records=False)
    ep = files.episodes
    columns = {
        "index": ep.index,
        "length": ep.length,
        "shard": ep.shard,
        "frames_record_start": ep.frames_record_start,
        f"record_start/{CAM}": ep.record_start[CAM],
    }
    counts = {CAM: np.array([ep.segments[CAM].count(r) for r in range(len(ep))])}
    return files.info, columns, counts


def _edit(columns, name, row, value):
    edited = {k: v.copy() for k, v in columns.items()}
    edited[name][row] = value
    return edited


def test_the_columns_of_a_conversion_pass(table):
    info, columns, counts = table
    assert info.num_shards == 2 and columns["shard"].tolist() == [0, 0, 0, 1]
    check_table(PATH, info, columns)
    check_record_layout(PATH, info, columns, counts)


@pytest.mark.parametrize(
    "name, row, value, message",
    [
        ("length", 1, 0, "episode 1 has length 0"),
        ("length", 2, 39, r"4 episodes / 65 frames, but meta/info\.json says 4 / 66"),
        ("shard", 3, 2, "episode 3 has shard 2"),
        ("frames_record_start", 2, -1, "episode 2 has frames_record_start -1"),
        (f"record_start/{CAM}", 0, -4, rf"episode 0 has videos/{CAM}/record_start -4"),
        ("index", 3, 1, "an episode_index appears twice"),
    ],
)
def test_a_table_that_disagrees_with_info_json_names_the_episode(table, name, row, value, message):
    info, columns, _ = table
    edited = _edit(columns, name, row, value)
    if name == "length" and value == 0:  # keep the total, so the range check speaks
        edited["length"][2] += 1
    with pytest.raises(DatasetError, match=rf"^{PATH}: {message}; the table is corrupt"):
        check_table(PATH, info, edited)


def test_missing_rows_are_counted_against_info_json(table):
    info, columns, _ = table
    fewer = {k: v[:3] for k, v in columns.items()}
    with pytest.raises(DatasetError, match=r"3 episodes / 46 frames, but .* says 4 / 66"):
        check_table(PATH, info, fewer)


@pytest.mark.parametrize(
    "name, row, value, message",
    [
        (
            f"record_start/{CAM}",
            2,
            11,
            rf"episode 2, camera {CAM}: records start at 11, "
            r"expected 10 \(right after the previous ones\)",
        ),
        ("frames_record_start", 1, 4, "episode 1 starts at record 4 of shard 0, expected 5"),
    ],
)
def test_records_that_do_not_follow_each_other_name_the_episode(table, name, row, value, message):
    info, columns, counts = table
    edited = _edit(columns, name, row, value)
    if name == "frames_record_start":  # its camera records move with it
        edited[f"record_start/{CAM}"][row] += value - columns[name][row]
    with pytest.raises(DatasetError, match=rf"^{PATH}: {message}"):
        check_record_layout(PATH, info, edited, counts)


def test_rows_out_of_record_order_are_refused(table):
    info, columns, counts = table
    order = [1, 0, 2, 3]  # two episodes' rows swapped, records unchanged
    swapped = {k: v[order] for k, v in columns.items()}
    with pytest.raises(DatasetError, match=r"episode 1 \(row 0\) is not stored after the row"):
        check_record_layout(PATH, info, swapped, {CAM: counts[CAM][order]})


def test_a_shard_whose_episodes_end_elsewhere_than_info_json_says_is_named(table):
    info, columns, counts = table
    more = dataclasses.replace(info, shard_records=(info.shard_records[0], 13))
    with pytest.raises(DatasetError, match=r"shard 1's episodes end at record 12, but .* 13"):
        check_record_layout(PATH, more, columns, counts)
    check_record_layout(PATH, dataclasses.replace(info, shard_records=()), columns, counts)


def _gops(lengths, gop):
    """(offsets, starts) of episodes of `lengths` cut into GOPs of `gop` frames."""
    starts = [np.arange(0, n, gop) for n in lengths]
    return np.r_[0, np.cumsum([len(s) for s in starts])], np.concatenate(starts)


LEN = np.array(LENGTHS)


def test_gop_tables_that_tile_their_episodes_pass():
    offsets, starts = _gops(LENGTHS, 4)
    assert first_untiled(offsets, starts, LEN) is None
    assert first_untiled(np.zeros(1, np.int64), np.zeros(0, np.int64), LEN[:0]) is None


@pytest.mark.parametrize(
    "edit, row",
    [
        (lambda s, o: s.__setitem__(o[2] + 1, 0), 2),  # a start falls back
        (lambda s, o: s.__setitem__(o[2] + 2, s[o[2] + 1]), 2),  # a start repeats
        (lambda s, o: s.__setitem__(o[3], 1), 3),  # the first GOP is not at frame 0
        (lambda s, o: s.__setitem__(o[4] - 1, 20), 3),  # the last starts past the end
        (lambda s, o: s.__setitem__(o[1], 3), 1),  # a one-frame episode's GOP at 3
    ],
)
def test_gop_tables_that_do_not_tile_name_the_first_bad_episode(table, edit, row):
    offsets, starts = _gops(LENGTHS, 4)
    edit(starts, offsets)
    assert first_untiled(offsets, starts, LEN) == row
    _, columns, _ = table
    with pytest.raises(DatasetError, match=rf"^{PATH}: episode {row}, camera {CAM}: GOP starts"):
        check_gops(PATH, CAM, columns, offsets, starts)
    check_gops(PATH, CAM, columns, offsets, starts, tiled=True)  # known tiled: not checked


def test_an_episode_without_gops_does_not_tile():
    offsets = np.array([0, 2, 3, 3, 8])  # episode 2: no GOP
    starts = np.array([0, 4, 0, 0, 4, 8, 12, 16])
    assert first_untiled(offsets, starts, LEN) == 2
