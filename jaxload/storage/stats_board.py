"""Remote read counters of worker processes, visible in the main process's `loader.stats`.

With `num_workers > 0` the records are fetched in the worker processes, each with its own
`RemoteStore` (and cache). Each of them publishes its counters every second, from a thread
of its own (a worker whose output buffer is full reads nothing for a while, and its
fetches and retries go on meanwhile), as a JSON file named by its pid in a directory the
main process made; the loader adds them up (`combine`). Files are replaced atomically, so
a reader sees a whole snapshot.

    board = StatsBoard()                          # main process; picklable (a path)
    board.keep_published("s3://b/ds", store)      # in a worker: store.stats() every second
    combine([main_stats, *board.read("s3://b/ds")])
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from jaxload.storage.scratch import owned_directory, process_alive, remove_owned

# Counters that add up over processes (the rest are estimates, averaged, or identities).
SUMMED = (
    "requests",
    "bytes_fetched",
    "records_fetched",
    "waits",
    "retries",
    "cache_bytes",
    "cache_budget_bytes",
    "cache_records",
    "cache_hits",
    "cache_misses",
    "cache_evictions",
    "cache_early_evictions",
    "cache_damaged",
)
# What a process's cache holds now: summed over the processes still running.
HELD = ("cache_bytes", "cache_budget_bytes", "cache_records")
PUBLISH_EVERY_S = 1.0


class StatsBoard:
    """A directory of per-process stats snapshots, removed with the main process's board."""

    def __init__(self, directory: str | None = None):
        self.owner = directory is None
        self.directory = directory or owned_directory("jaxload-stats")
        if self.owner:
            weakref.finalize(self, remove_owned, self.directory)
        self._lock = threading.Lock()  # one writer of this process's file at a time
        self._kept: set[str] = set()  # urls published every second by a thread

    def __reduce__(self) -> Any:
        return (StatsBoard, (self.directory,))  # a worker writes there, never removes it

    def keep_published(self, url: str, store: Any) -> None:
        """Publishes `store.stats()` now and then every PUBLISH_EVERY_S, from a daemon
        thread, for as long as `store` lives (once per url and process)."""
        if url in self._kept:  # each read of the worker asks: no lock on that path
            return
        with self._lock:  # (held by a file write, now and then)
            if url in self._kept:
                return
            self._kept.add(url)
        self.publish(url, store.stats())
        alive = weakref.ref(store)

        def publishing() -> None:
            while True:
                time.sleep(PUBLISH_EVERY_S)
                current = alive()
                if current is None:
                    return
                self.publish(url, current.stats())
                del current  # no reference kept while asleep

        threading.Thread(target=publishing, name="jaxload-stats", daemon=True).start()

    def publish(self, url: str, stats: dict[str, Any]) -> None:
        """This process's counters for dataset `url` (replacing its previous snapshot)."""
        path = os.path.join(self.directory, f"{os.getpid()}.json")
        with self._lock, contextlib.suppress(OSError):  # the loader closed: nothing to tell
            snapshot = _load(path)
            snapshot[url] = stats
            with open(path + ".tmp", "w") as f:
                json.dump(snapshot, f)
            os.replace(path + ".tmp", path)

    def read(self, url: str) -> list[dict[str, Any]]:
        """The latest snapshot for `url` of every other process that published one; those
        of processes that ended (the workers of a pipeline the loader closed or dropped)
        marked `ended`: their requests were made, but they hold no cache any more."""
        mine = f"{os.getpid()}.json"
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.endswith(".json"))
        except OSError:
            return []
        out = []
        for name in names:
            snapshot = _load(os.path.join(self.directory, name)).get(url) if name != mine else None
            if snapshot:
                ended = not process_alive(int(name.split(".")[0]))
                out.append(dict(snapshot, ended=True) if ended else snapshot)
        return out


def combine(stats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counters of several processes as one: sums, the hit rate of the sums, and the
    request latency averaged over the processes' requests. Processes that fetched nothing
    (the main process of a loader whose workers read) are left out, and what the caches
    hold is summed over the processes still running; the other estimates are those of
    the process that made the most requests."""
    stats = [s for s in stats if s.get("requests")] or list(stats[:1])
    running = [s for s in stats if not s.get("ended")]
    first = dict(max(running or stats, key=lambda s: s.get("requests", 0)))
    first.pop("ended", None)
    for name in SUMMED:
        first[name] = sum(s.get(name, 0) for s in (running if name in HELD else stats))
    lookups = first["cache_hits"] + first["cache_misses"]
    first["cache_hit_rate"] = first["cache_hits"] / lookups if lookups else 0.0
    requests = sum(s.get("requests", 0) for s in stats)
    if requests:
        first["latency_ms"] = round(
            sum(s["latency_ms"] * s.get("requests", 0) for s in stats) / requests, 2
        )
    first["transport"] = next((s["transport"] for s in stats if s.get("transport")), None)
    first["processes"] = len(running)
    return first


def progress_line(stats: dict[str, Any]) -> str:
    """What a progress log line says of (combined) counters."""
    processes = stats.get("processes", 1)
    return (
        f"{stats['requests']} requests, {stats['bytes_fetched'] / 1e6:.1f} MB fetched for "
        f"{stats['records_fetched']} records, cache hit rate {100 * stats['cache_hit_rate']:.1f}% "
        f"({stats['cache_bytes'] / 1e6:.1f} MB of {stats['cache_budget_bytes'] / 1e6:.1f} MB"
        f"{f' in {processes} processes' if processes > 1 else ''}), latency "
        f"{stats['latency_ms']:.1f} ms, {stats['bandwidth_mb_s']:.0f} MB/s"
    )


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
