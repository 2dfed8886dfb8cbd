"""Reads that never keep the process from exiting.

Grain's read threads (``to_iter_dataset``'s thread pool) are joined at interpreter exit
(concurrent.futures' exit hook), for as long as their read runs: one stuck in a user's
`batch_transform`, or on storage that never answers, kept a trainer from ever exiting,
even after the loader raised WorkerTimeoutError and was closed. So each read runs on a
daemon thread of its own (`DaemonReads.run`), paired with the Grain thread that asked for
it (so what a thread keeps, such as its video decoders, stays with one thread), while the
Grain thread waits. `release()` (the loader's close, or the loader dropping a pipeline)
ends every wait at once: the Grain threads return and exit. At exit, reads still running
get EXIT_WAIT_S to end (a thread inside native code, a decoder, while the interpreter ends
aborts the process), except those the loader timed out (`release(stuck=True)`), which are
left to their daemon threads.

    reads = DaemonReads()
    reads.run(read_batch_k, k)   # in a Grain read thread; the result, or its error
    reads.release()              # from the training thread: waits end, new reads refused
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

# How long `release` waits for an idle runner to end (it ends at once: its queue is woken).
IDLE_JOIN_S = 5.0
# How long interpreter exit waits, in all, for the reads still running (`_finish_at_exit`).
EXIT_WAIT_S = 10.0


class ReadsReleased(RuntimeError):
    """The loader let go of this pipeline while the read ran (its result is not needed)."""


class _Call:
    __slots__ = ("args", "done", "error", "fn", "released", "result")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]):
        self.fn, self.args = fn, args
        self.done = threading.Event()
        self.released = False  # the waiting thread no longer waits
        self.result: Any = None
        self.error: BaseException | None = None


class _Runner:
    """One daemon thread running the calls of one Grain read thread, in order."""

    def __init__(self, name: str):
        self.calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self.busy = False  # running a call
        self.stuck = False  # in a call the loader timed out: exit does not wait for it
        self.thread = threading.Thread(target=self._serve, daemon=True, name=name)
        self.thread.start()

    def _serve(self) -> None:
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            while (call := self.calls.get()) is not None:
                if call.released:
                    continue
                self.busy = True
                try:
                    call.result = call.fn(*call.args)
                except BaseException as e:  # raised in the waiting thread
                    call.error = e
                self.busy = False
                call.done.set()
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)

    def stop(self) -> None:
        """The thread ends after the call it runs, if any (never interrupted)."""
        self.calls.put(None)


class DaemonReads:
    """Runs reads on daemon threads, one per calling thread; `release` ends every wait.

    Picklable: each process (a Grain worker) makes its own threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._released = False
        self._local = threading.local()
        self._runners: list[_Runner] = []
        self._waiting: set[_Call] = set()
        # Runners of a pipeline dropped without release() end with it.
        weakref.finalize(self, _stop_all, self._runners)

    def __getstate__(self) -> dict:
        return {"fresh": True}  # (an empty state would skip __setstate__)

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) on this thread's daemon runner: its result, or its error raised here;
        ReadsReleased when the loader lets go meanwhile (or had already)."""
        call = _Call(fn, args)
        with self._lock:
            if self._released:
                raise ReadsReleased("the loader closed this pipeline")
            runner = getattr(self._local, "runner", None)
            if runner is None:
                name = f"jaxload-read-{threading.current_thread().name}"
                runner = self._local.runner = _Runner(name)
                self._runners.append(runner)
            self._waiting.add(call)
            runner.calls.put(call)
        try:
            call.done.wait()
        finally:
            with self._lock:
                self._waiting.discard(call)
        if call.released:
            raise ReadsReleased("the loader closed this pipeline while this read ran")
        if call.error is not None:
            raise call.error
        return call.result

    def release(self, *, stuck: bool = False) -> None:
        """Ends every wait (ReadsReleased) and refuses new reads; runners end after their
        current read, and one that never ends stays behind on its daemon thread. `stuck`:
        the reads running now are stuck (the loader timed them out): interpreter exit
        does not wait for them."""
        if stuck:
            for runner in self._runners:
                runner.stuck = runner.stuck or runner.busy
        with self._lock:
            self._released = True
            for call in self._waiting:
                call.released = True
                call.done.set()
            self._waiting.clear()
        _stop_all(self._runners)


def _stop_all(runners: list[_Runner]) -> None:
    """Stops every runner, and waits for those not inside a read (they end at once)."""
    for runner in runners:
        runner.stop()
    for runner in runners:
        if not runner.busy and runner.thread is not threading.current_thread():
            runner.thread.join(IDLE_JOIN_S)


# Runners whose thread runs (each adds itself, and leaves as its thread ends).
_LIVE: set[_Runner] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _finish_at_exit() -> None:
    """At exit, while the interpreter still runs threads: every runner is stopped and each
    read still running gets until EXIT_WAIT_S to end, as Grain's read threads got (joined
    at exit, but for ever). A thread left inside native code (decoding, reading a file)
    while the interpreter ends makes the process abort ("terminate called without an
    active exception"); one stuck for good in Python (a batch_transform) is left behind."""
    with _LIVE_LOCK:
        runners = list(_LIVE)
    deadline = time.monotonic() + EXIT_WAIT_S
    for runner in runners:
        runner.stop()
    for runner in runners:
        if not runner.stuck:
            runner.thread.join(max(0.0, deadline - time.monotonic()))
