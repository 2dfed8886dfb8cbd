"""`WatchReaders`, the reader watchdog: a reader (worker process, or the read threads)
silent past its deadline is an error naming the worker and the batch, not a hang."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import grain

from jaxload.errors import WorkerTimeoutError
from jaxload.workers.processes import WorkerRegistry

# A reader's deadline is at least this many times the slowest batch seen after start-up,
# so a pipeline that is merely slow (large batches, slow storage) is never called stuck.
SLOWEST_BATCH_FACTOR = 4
# ... and at least this long for a reader's first batch, which includes starting the worker
# process (importing jax and torch: ~5 s of CPU here, more on a busy machine).
STARTUP_GRACE_S = 60.0


class WatchReaders(grain.IterDataset):
    """Passes batches through; raises WorkerTimeoutError when the reader that owes the next
    batch delivers none within the deadline (a stopped worker, or one stuck on storage).

    Batch n comes from worker n % num_workers (mp_prefetch's round robin), so the error
    names the worker, its pid (`workers`, the pipeline's WorkerRegistry) and what batch n
    reads (`describe(n)`). The first batch asked for starts every worker at once (Grain's
    `start_prefetch`; otherwise each starts when the round robin first reaches it). The
    deadline is `timeout_s`, or SLOWEST_BATCH_FACTOR times the slowest batch seen after
    every reader's first, whichever is longer; a reader's first batch, which includes
    starting the worker, gets at least STARTUP_GRACE_S.
    """

    def __init__(
        self,
        parent: grain.IterDataset,
        timeout_s: float,
        describe: Callable[[int], str],
        workers: WorkerRegistry | None,
        num_workers: int,
    ):
        super().__init__(parent)
        self.upstream = parent
        self.timeout_s, self.describe = timeout_s, describe
        self.workers, self.num_workers = workers, num_workers

    def __iter__(self) -> grain.DatasetIterator:
        return _WatchedIterator(self.upstream.__iter__(), self)


class _WatchedIterator(grain.DatasetIterator):
    """The parent's next() runs in a helper thread, so the wait for it can time out."""

    def __init__(self, parent: grain.DatasetIterator, watch: WatchReaders):
        super().__init__(parent)
        self._upstream = parent
        self._watch = watch
        self._count: int | None = 0  # batches delivered: the next one is batch `_count`
        self._slowest = 0.0
        self._stuck: WorkerTimeoutError | None = None
        self._requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
        self._helper: threading.Thread | None = None

    def __next__(self) -> Any:
        if self._stuck is not None:
            raise self._stuck
        if self._helper is None:
            self._upstream.start_prefetch()  # every worker process at once
            # A daemon thread: one stuck on a stopped worker must not hold up interpreter exit.
            self._helper = threading.Thread(target=self._serve, daemon=True, name="jaxload-watch")
            self._helper.start()
        started = time.monotonic()
        self._requests.put(True)
        deadline = max(self._watch.timeout_s, SLOWEST_BATCH_FACTOR * self._slowest)
        if self._starting:
            deadline = max(deadline, STARTUP_GRACE_S)
        try:
            element, error = self._results.get(timeout=min(deadline, threading.TIMEOUT_MAX))
        except queue.Empty:
            self._stuck = self._timeout_error(time.monotonic() - started)
            raise self._stuck from None
        if error is not None:
            raise error
        if not self._starting:
            self._slowest = max(self._slowest, time.monotonic() - started)
        if self._count is not None:
            self._count += 1
        return element

    @property
    def _starting(self) -> bool:
        """Whether the next batch is some reader's first."""
        return self._count is not None and self._count < max(1, self._watch.num_workers)

    def _serve(self) -> None:
        while self._requests.get():
            try:
                self._results.put((self._upstream.__next__(), None))
            except BaseException as e:  # handed to __next__, raised there
                self._results.put((None, e))

    def _timeout_error(self, waited: float) -> WorkerTimeoutError:
        n, count = self._count, self._watch.num_workers
        pid, reader = None, "the read threads of this process"
        if count and n is not None and self._watch.workers is not None:
            pid = self._watch.workers.pid(n % count)
            reader = f"worker {n % count} of {count} (pid {pid})"
        elif count:
            reader = f"one of the {count} worker processes"
        batch = "its batch" if n is None else f"batch {n} ({self._watch.describe(n)})"
        slowest = f"{self._slowest:.3g} s" if self._slowest else "none measured yet"
        error = WorkerTimeoutError(
            f"{reader} delivered no batch for {waited:.0f} s (worker_timeout_s="
            f"{self._watch.timeout_s:g}; slowest batch so far: {slowest}): it is stopped, or "
            f"stuck reading {batch}. The loader stopped its readers; next() restarts them "
            "at the same position."
        )
        error.pid = pid
        return error

    def get_state(self) -> dict[str, Any]:
        return self._upstream.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._upstream.set_state(state)
        self._count = None  # Grain's own state: which batch comes next is no longer known

    def close(self) -> None:
        self._requests.put(False)
        super().close()
