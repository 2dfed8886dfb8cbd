"""Byte-range requests for records (jaxload.storage.coalesce): records merged per shard
across small gaps, up to the request size limit, every record in exactly one request."""

from __future__ import annotations

import numpy as np

from jaxload.storage.coalesce import coalesce

# record r of shard 0 is bytes OFFSETS[r]..OFFSETS[r + 1]: sizes 10, 10, 100, 10, 1000, 10
OFFSETS = {0: np.array([0, 10, 20, 120, 130, 1130, 1140]), 1: np.array([0, 50, 100])}


def test_adjacent_records_are_one_request():
    assert coalesce([(0, 0), (0, 1), (0, 2)], OFFSETS, gap=0, most=1 << 20) == [
        (0, 0, 120, [0, 1, 2])
    ]


def test_a_gap_is_spanned_only_up_to_gap_bytes():
    keys = [(0, 1), (0, 3)]  # record 2's 100 bytes between them
    assert coalesce(keys, OFFSETS, gap=100, most=1 << 20) == [(0, 10, 130, [1, 3])]
    assert coalesce(keys, OFFSETS, gap=99, most=1 << 20) == [(0, 10, 20, [1]), (0, 120, 130, [3])]


def test_a_request_stops_at_most_bytes_and_a_larger_record_is_its_own():
    keys = [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5)]
    requests = coalesce(keys, OFFSETS, gap=0, most=120)
    assert requests == [
        (0, 0, 120, [0, 1, 2]),
        (0, 120, 130, [3]),
        (0, 130, 1130, [4]),  # over `most` alone
        (0, 1130, 1140, [5]),
    ]
    covered = sorted(r for _, _, _, records in requests for r in records)
    assert covered == [r for _, r in keys]


def test_shards_are_never_merged_and_a_repeated_record_stays_in_its_request():
    requests = coalesce([(0, 5), (1, 0), (1, 1)], OFFSETS, gap=1 << 20, most=1 << 20)
    assert requests == [(0, 1130, 1140, [5]), (1, 0, 100, [0, 1])]
    assert coalesce([(1, 0), (1, 0)], OFFSETS, gap=0, most=1 << 20) == [(1, 0, 50, [0, 0])]
