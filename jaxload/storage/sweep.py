"""How long the sweep of `jaxload.storage.prefetch` takes to pass over the dataset once:
its period P, in batches, fed back by the record cache.

A longer period fetches fewer bytes per batch (one pass over the dataset serves more
batches) but keeps records cached longer. It starts where a record would stay cached from
its arrival to its use, on average the lead (less the batches a request is in flight)
+ P / 2 batches, in 80% of the budget (`fits` batches of records). The cache then says
how long P can be: it shrinks by a quarter
whenever a record is evicted before a planned batch read it, and grows by an eighth after
a whole window in which the records still to be read never filled 75% of the budget
(growing while below 85% or 95% instead fetched more: the early evictions cost requests).

    period = SweepPeriod()
    P = period.update(store.cache, fits=8.0, lead=3)   # once per batch planned

`SweepSchedule` turns it, the measured latency and the cache budget into the lead and
window a remote store asks the lookahead for (`RemoteStore.lookahead`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

log = logging.getLogger("jaxload.storage")

MAX_PERIOD = 1024  # batches: the longest sweep (the lookahead plans no further anyway)
GROW_BELOW = 0.75  # the sweep lengthens while records still to be read fill less of the cache


@dataclasses.dataclass
class SweepPeriod:
    """The period and what it was last changed on (see the module docstring)."""

    period: int | None = None  # batches; None until the first update
    since: int = 0  # batches since the period last changed or was checked
    early: int = 0  # the cache's early evictions when last looked at

    def update(self, cache: Any, fits: float, lead: int, in_flight: float = 0.0) -> int:
        """The period for the next batch, from `cache` (a `RecordCache`): its early
        evictions and the peak of the bytes it holds for planned reads. `in_flight`: the
        batches of the lead a request is in flight (its records not yet cached)."""
        if self.period is None:
            held = max(1.0, lead - in_flight)
            self.period = max(1, int(2 * fits - 2 * held))
        self.since += 1
        if cache.early_evictions > self.early:
            self.period, self.since = max(1, self.period * 3 // 4), 0
            self.early = cache.early_evictions
            cache.take_peak_planned()
        elif self.since >= lead + self.period:
            self.since = 0
            if cache.take_peak_planned() < GROW_BELOW * cache.budget_bytes:
                self.period = min(MAX_PERIOD, self.period + max(1, self.period // 8))
        return self.period


# A cache of fewer batches of records than this is said to be too small: on the 2.6 MB
# example dataset a 10% cache (one batch) fetched 290x its bytes, 25% (2.5 batches) much less.
SMALL_CACHE_BATCHES = 3


def too_small(budget_bytes: int, batch_bytes: float, dataset_bytes: float) -> str | None:
    """What to say of a cache budget that holds under SMALL_CACHE_BATCHES batches of the
    records a batch reads (each pass of the sweep then serves about one batch), or None."""
    if budget_bytes >= SMALL_CACHE_BATCHES * batch_bytes or budget_bytes >= dataset_bytes:
        return None
    want = int(min(8 * batch_bytes, 1.1 * dataset_bytes))
    holds = "8 batches" if want < 1.1 * dataset_bytes else "the whole dataset"
    return (
        f"the cache (cache_bytes={budget_bytes}, per process) holds {budget_bytes / batch_bytes:.1f} "
        f"batches of the records a batch reads of it ({batch_bytes / 1e6:.2f} MB each): with under "
        f"{SMALL_CACHE_BATCHES}, records are fetched again for nearly every use (a small "
        f"dataset's bytes over and over); RemoteOptions(cache_bytes={want}) holds {holds} "
        "(docs/LOADER.md, Remote datasets)"
    )


class SweepSchedule:
    """The lead and window of one remote dataset's sweep (the cache policy), from its
    cache, the measured request latency and batch interval, and `RemoteOptions.lookahead`."""

    def __init__(self, url: str, lookahead: int | None = None):
        self.url, self.fixed_window = url, lookahead
        self._sweep = SweepPeriod()
        self.period_used: int | None = None  # the sweep's period last used (stats)
        self._small_cache_said = False  # too_small, said once

    def lookahead(
        self,
        cache: Any,
        latency_s: float,
        dataset_bytes: float,
        batch_interval_s: float | None,
        batch_bytes: float,
    ) -> tuple[int, int]:
        """(lead, window) in batches for the sweep of `jaxload.storage.prefetch`, asked
        once per batch read. The lead covers three request latencies at the measured batch
        interval where half the cache holds that, else 1.3 where the cache holds more: a
        record fetched later is in flight when its batch needs it (at 50 ms and a 10%
        cache, half the cache gave 3 batches, 45 ms; 5 halved the waits, +3.5-5% samples/s
        in paired runs); the rest of the window, the sweep's period P, is as long as the
        cache holds (`SweepPeriod`), and at most the batches that read the dataset's bytes
        twice: a longer sweep saves no bytes (a cache that large keeps what passes), and
        planning that far ahead cost a cache larger than a small dataset a second of
        planning 1,024 batches before its second batch."""
        if not self._small_cache_said:  # once: each batch asks
            small = too_small(cache.budget_bytes, batch_bytes, dataset_bytes)
            self._small_cache_said = small is not None
            if small:
                log.warning("%s: %s", self.url, small)
        fits = max(2.0, 0.8 * cache.budget_bytes / max(batch_bytes, 1.0))
        interval = batch_interval_s if batch_interval_s else 0.01
        latencies = latency_s / max(interval, 1e-3)  # in batches
        roomy = min(math.ceil(3 * latencies) + 1, int(fits) // 2)
        lead = min(max(1, roomy, min(math.ceil(1.3 * latencies), int(fits) - 1)), 512)
        if self.fixed_window is not None:
            window = max(1, int(self.fixed_window))
            return min(lead, max(1, window // 2)), window
        period = self._sweep.update(cache, fits, lead, in_flight=math.floor(latencies))
        twice = 2 * dataset_bytes / max(batch_bytes, 1.0)
        self.period_used = math.ceil(twice) if twice < period else period
        return lead, lead + self.period_used
