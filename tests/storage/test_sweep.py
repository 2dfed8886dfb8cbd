"""The sweep's lead and window (jaxload.storage.sweep) from a real `RecordCache`, the
request latency and the batch interval: no store, no network."""

from __future__ import annotations

import logging

from jaxload.storage.cache import RecordCache
from jaxload.storage.sweep import SweepSchedule, too_small

LARGE = 1e12  # dataset bytes: no cap from reading it twice


def test_the_sweep_lengthens_while_the_cache_has_room_and_shortens_after_an_early_eviction():
    cache, schedule = RecordCache(1000), SweepSchedule("s3://b/ds")
    # 50 ms latency, 10 ms a batch, 100 bytes a batch (8 batches fit in 80% of the cache):
    # a lead of 1.3 latencies (7 batches), a period of 2 * 8 - 2 * 2 (5 batches in flight).
    assert schedule.lookahead(cache, 0.05, LARGE, 0.01, 100.0) == (7, 19)
    for _ in range(19):  # a whole window in which nothing waited in the cache
        schedule.lookahead(cache, 0.05, LARGE, 0.01, 100.0)
    assert schedule.lookahead(cache, 0.05, LARGE, 0.01, 100.0) == (7, 20)
    for i in range(11):  # records a far batch reads, more than the budget holds
        cache.plan(("x", i), 10**6)
        cache.put(("x", i), b"x" * 100)
    assert cache.early_evictions == 1
    assert schedule.lookahead(cache, 0.05, LARGE, 0.01, 100.0) == (7, 7 + 13 * 3 // 4)
    for _ in range(20):  # the cache stays full: no longer again
        schedule.lookahead(cache, 0.05, LARGE, 0.01, 100.0)
    assert schedule.lookahead(cache, 0.05, LARGE, 0.01, 100.0) == (7, 16)
    # A slower reader (100 ms a batch): three latencies and a batch, as half the cache holds.
    assert SweepSchedule("s3://b/ds").lookahead(RecordCache(1000), 0.05, LARGE, 0.1, 100.0)[0] == 3


def test_the_period_is_no_longer_than_two_reads_of_the_dataset():
    schedule = SweepSchedule("s3://b/ds")
    lead, window = schedule.lookahead(RecordCache(1 << 30), 0.05, 1000.0, 0.01, 100.0)
    assert window - lead == 20 and schedule.period_used == 20


def test_a_fixed_window_is_kept_and_the_lead_is_at_most_half_of_it():
    schedule = SweepSchedule("s3://b/ds", lookahead=6)
    assert schedule.lookahead(RecordCache(1000), 0.05, LARGE, 0.01, 100.0) == (3, 6)


def test_a_cache_of_under_three_batches_is_said_to_be_too_small_once(caplog):
    assert too_small(300, 100.0, LARGE) is None and too_small(200, 100.0, 150.0) is None
    message = too_small(200, 100.0, LARGE)
    assert "holds 2.0 batches" in message and "cache_bytes=800" in message
    schedule = SweepSchedule("s3://b/ds")
    with caplog.at_level(logging.WARNING, logger="jaxload.storage"):
        for _ in range(3):
            schedule.lookahead(RecordCache(200), 0.05, LARGE, 0.01, 100.0)
    assert (
        sum("too small" in r.getMessage() or "holds 2.0" in r.getMessage() for r in caplog.records)
        == 1
    )
