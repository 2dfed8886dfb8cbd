"""Remote read counters of worker processes (jaxload.storage.stats_board): snapshots
published per process into the board's directory, read back by the main process, and
combined into one set of counters."""

from __future__ import annotations

import gc
import json
import os
import pickle
import subprocess
import sys

import pytest

from jaxload.storage.stats_board import StatsBoard, combine, progress_line

URL = "s3://b/ds"


def test_a_snapshot_is_published_per_process_and_replaced_whole():
    board = StatsBoard()
    board.publish(URL, {"requests": 1})
    board.publish("s3://b/other", {"requests": 2})
    board.publish(URL, {"requests": 3})
    path = os.path.join(board.directory, f"{os.getpid()}.json")
    with open(path) as f:
        assert json.load(f) == {URL: {"requests": 3}, "s3://b/other": {"requests": 2}}
    assert not [n for n in os.listdir(board.directory) if n.endswith(".tmp")]
    assert board.read(URL) == []  # this process's own snapshot is not another's


def test_other_processes_snapshots_are_read_and_those_of_ended_ones_marked():
    board = StatsBoard()
    dead = 2**22 + 12345  # above any pid this machine hands out (pid_max is 2**22)
    with open(os.path.join(board.directory, f"{dead}.json"), "w") as f:
        json.dump({URL: {"requests": 4}}, f)
    with open(os.path.join(board.directory, "77.json"), "w") as f:
        f.write("{torn")  # a snapshot that does not parse counts as none
    assert board.read(URL) == [{"requests": 4, "ended": True}]
    assert board.read("s3://b/none") == []


def test_a_worker_gets_the_directory_and_only_the_main_board_removes_it():
    board = StatsBoard()
    directory = board.directory
    worker = pickle.loads(pickle.dumps(board))
    assert worker.directory == directory and not worker.owner
    del worker
    gc.collect()
    assert os.path.isdir(directory)
    del board
    gc.collect()
    assert not os.path.exists(directory)


class _Store:
    def __init__(self):
        self.asked = 0

    def stats(self):
        self.asked += 1
        return {"requests": self.asked}


def test_a_store_is_published_at_once_and_kept_once_per_url():
    board, store = StatsBoard(), _Store()
    board.keep_published(URL, store)
    board.keep_published(URL, store)  # once per url and process
    assert store.asked == 1
    with open(os.path.join(board.directory, f"{os.getpid()}.json")) as f:
        assert json.load(f) == {URL: {"requests": 1}}


def test_the_progress_line_says_requests_bytes_cache_and_speed():
    stats = {"requests": 12, "bytes_fetched": 3_500_000, "records_fetched": 40,
             "cache_hit_rate": 0.25, "cache_bytes": 1_000_000, "cache_budget_bytes": 8_000_000,
             "latency_ms": 12.34, "bandwidth_mb_s": 99.6}  # fmt: skip
    assert progress_line(stats) == (
        "12 requests, 3.5 MB fetched for 40 records, cache hit rate 25.0% (1.0 MB of 8.0 MB), "
        "latency 12.3 ms, 100 MB/s"
    )
    assert "MB in 3 processes)" in progress_line({**stats, "processes": 3})


def test_stats_of_processes_add_up_and_leave_out_the_one_that_fetched_nothing():
    def process(requests, hits, misses, bandwidth):
        return {
            "requests": requests, "bytes_fetched": 1000 * requests, "records_fetched": requests,
            "waits": 0, "retries": 1, "cache_bytes": 10, "cache_budget_bytes": 100,
            "cache_records": 1, "cache_hits": hits, "cache_misses": misses,
            "cache_evictions": 0, "latency_ms": 10.0 * requests, "bandwidth_mb_s": bandwidth,
            "coalesce_bytes": 1, "transport": "signed" if requests else None,
        }  # fmt: skip

    main, busy, idle = process(0, 0, 0, 100.0), process(30, 6, 2, 42.0), process(10, 2, 0, 7.0)
    out = combine([main, busy, idle])
    assert out["processes"] == 2 and out["cache_budget_bytes"] == 200  # the main one: out
    assert out["requests"] == 40 and out["retries"] == 2
    assert out["cache_hit_rate"] == 8 / 10
    assert out["bandwidth_mb_s"] == 42.0  # measured by the busiest, not the main's default
    assert out["latency_ms"] == (300 * 30 + 100 * 10) / 40
    assert combine([main])["processes"] == 1  # nothing fetched yet: still a row


@pytest.mark.processes
def test_stats_of_ended_worker_processes_count_their_requests_but_not_their_caches():
    # the workers of a pipeline the loader dropped (after a RemoteError) or closed left
    # their snapshots: before, their caches and their number were added to the new ones'
    board = StatsBoard()
    stats = {"requests": 5, "bytes_fetched": 50, "cache_hits": 1, "cache_misses": 1,
             "cache_bytes": 7, "cache_budget_bytes": 100, "cache_records": 2, "latency_ms": 1.0,
             "transport": "signed"}  # fmt: skip
    code = (
        "import sys; from jaxload.storage.stats_board import StatsBoard; "
        f"StatsBoard({board.directory!r}).publish('s3://b/ds', {stats!r}); "
        "print('published', flush=True); sys.stdin.read()"
    )
    ended = subprocess.run([sys.executable, "-c", code], input="", capture_output=True, text=True)
    assert "published" in ended.stdout, ended.stderr
    running = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert running.stdout.readline().strip() == "published"
        snapshots = board.read("s3://b/ds")
        assert sorted(bool(s.get("ended")) for s in snapshots) == [False, True]
        out = combine(snapshots)
        assert out["processes"] == 1 and out["requests"] == 10 and out["bytes_fetched"] == 100
        assert out["cache_bytes"] == 7 and out["cache_budget_bytes"] == 100
        assert "ended" not in out
    finally:
        running.communicate("")
