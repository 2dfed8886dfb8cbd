"""What records are sealed with (jaxload.format.sealing): digests over canonical forms, the
converter's streamed column digests equal to the reader's whole-column ones, and each check
naming the file and the field that was edited."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from jaxload.errors import DatasetError
from jaxload.format import sealing

WHERE = "ds/meta/info.json"


def test_json_digest_ignores_key_order_and_sees_every_value():
    assert sealing.json_digest({"a": 1, "b": [2, 3]}) == sealing.json_digest({"b": [2, 3], "a": 1})
    assert sealing.json_digest({"a": 1, "b": [2, 3]}) != sealing.json_digest({"a": 1, "b": [3, 2]})
    assert sealing.json_digest(10) != sealing.json_digest(10.5)


def test_records_key_changes_with_seed_fingerprint_and_each_digest():
    metadata = {"fps": "aa", "episodes": {"length": "bb"}}
    key = sealing.records_key(7, "f" * 64, metadata)
    assert 0 <= key < 1 << 64
    assert key == sealing.records_key(7, "f" * 64, {"episodes": {"length": "bb"}, "fps": "aa"})
    assert key != sealing.records_key(8, "f" * 64, metadata)
    assert key != sealing.records_key(7, "e" * 64, metadata)
    assert key != sealing.records_key(7, "f" * 64, {"fps": "aa", "episodes": {"length": "bc"}})


ROWS = [
    {"episode_index": 0, "length": 5, "gops": [0, 4], "tasks": ["pick", "é"], "lang": ["x"]},
    {"episode_index": 3, "length": 1, "gops": [0], "tasks": []},  # no `lang`: empty
    {"episode_index": 7, "length": 9, "gops": [0, 4, 8], "tasks": ["place"], "lang": ["", "yz"]},
]


def test_streamed_table_digests_equal_the_whole_column_digests():
    """The converter hashes rows one at a time; the reader hashes whole columns: the same
    digests, or every dataset would fail at open."""
    table = sealing.TableDigests(["gops"], ["lang"])
    for row in ROWS:
        table.add(row)

    def lists(name):
        values = [row.get(name) or [] for row in ROWS]
        return np.array([len(v) for v in values]), [x for v in values for x in v]

    counts, gops = lists("gops")
    expected = {
        "episode_index": sealing.ints_digest(np.array([0, 3, 7])),
        "length": sealing.ints_digest(np.array([5, 1, 9], np.int32)),  # any int dtype
        "gops": sealing.int_lists_digest(counts, np.array(gops)),
    }
    for name in ("tasks", "lang"):
        counts, strings = lists(name)
        expected[name] = sealing.string_lists_digest(counts, pa.array(strings, pa.string()))
    assert table.digests() == expected


def test_string_lists_digest_reads_chunked_sliced_and_empty_arrays_alike():
    counts = np.array([2, 1])
    whole = pa.array(["ab", "c", "déf"])
    digest = sealing.string_lists_digest(counts, whole)
    chunked = pa.chunked_array([pa.array(["ab"]), pa.array(["c", "déf"])])
    sliced = pa.array(["zz", "ab", "c", "déf"]).slice(1)  # a non-zero offset into its buffers
    assert sealing.string_lists_digest(counts, chunked) == digest
    assert sealing.string_lists_digest(counts, sliced) == digest
    # the split between strings counts: "ab","c" is not "a","bc"
    assert sealing.string_lists_digest(counts, pa.array(["a", "bc", "déf"])) != digest
    empty = sealing.string_lists_digest(np.zeros(2, np.int64), pa.chunked_array([], pa.string()))
    assert empty == sealing.string_lists_digest(np.zeros(2, np.int64), pa.array([], pa.string()))


def test_tasks_digest_sees_swapped_strings_and_takes_lists_or_arrays():
    index = np.array([0, 1])
    digest = sealing.tasks_digest(index, ["pick", "place"])
    assert sealing.tasks_digest(index, pa.array(["pick", "place"])) == digest
    assert sealing.tasks_digest(index, ["place", "pick"]) != digest
    sealing.check_tasks("ds/meta/tasks.parquet", {"tasks": digest}, digest)
    with pytest.raises(DatasetError, match=r"ds/meta/tasks\.parquet: the task table is not what"):
        sealing.check_tasks("ds/meta/tasks.parquet", {"tasks": digest}, "0" * 32)
    with pytest.raises(DatasetError, match="the task table is not what"):  # no digest: refused
        sealing.check_tasks("ds/meta/tasks.parquet", None, digest)


FEATURES = {"action": {"dtype": "float32", "shape": [4]}, "state": {"dtype": "float32"}}
CAMERAS = {"top": {"codec": "h264", "width": 64}}


def test_check_info_names_the_edited_field():
    written = sealing.info_digests(10, FEATURES, CAMERAS)
    sealing.check_info(WHERE, written, sealing.info_digests(10, FEATURES, CAMERAS))
    cases = [
        (sealing.info_digests(20, FEATURES, CAMERAS), r"fps is not what the records were"),
        (
            sealing.info_digests(10, {**FEATURES, "action": {"shape": [5]}}, CAMERAS),
            r"features\.action is not what",
        ),
        (
            sealing.info_digests(10, {"action": FEATURES["action"]}, CAMERAS),
            r"features\.state is missing, but the records were written with it",
        ),
        (
            sealing.info_digests(10, FEATURES, {**CAMERAS, "wrist": {}}),
            r"cameras\.wrist was not there when the records were written",
        ),
    ]
    for actual, message in cases:
        with pytest.raises(DatasetError, match=f"^{WHERE}: {message}"):
            sealing.check_info(WHERE, written, actual)
    with pytest.raises(DatasetError, match="metadata_xxh3 missing or not an object"):
        sealing.check_info(WHERE, None, written)
    with pytest.raises(DatasetError, match="has no entry for cameras"):
        sealing.check_info(WHERE, {**written, "cameras": "x"}, written)


def test_check_table_names_the_edited_column():
    where = "ds/meta/episodes.parquet"
    written = {"episodes": {"length": "aa", "episode_index": "bb"}}
    sealing.check_table(where, written, {"length": "aa", "episode_index": "bb"})
    with pytest.raises(DatasetError, match=r"episodes\.parquet: column length is not what"):
        sealing.check_table(where, written, {"length": "ab", "episode_index": "bb"})
    with pytest.raises(DatasetError, match=r": episode_index is missing, but the records were"):
        sealing.check_table(where, written, {"length": "aa"})
    with pytest.raises(DatasetError, match="no entry for column"):
        sealing.check_table(where, {}, {"length": "aa"})


def test_episode_and_records_digests_see_record_boundaries_and_order():
    one = sealing.episode_digest([b"ab", b"c"])
    assert one == sealing.episode_digest(iter([b"ab", b"c"]))
    assert one != sealing.episode_digest([b"a", b"bc"])  # length-prefixed
    two = sealing.episode_digest([b"x"])
    assert sealing.records_digest([one, two]) != sealing.records_digest([two, one])
    assert len(sealing.records_digest([])) == 64
