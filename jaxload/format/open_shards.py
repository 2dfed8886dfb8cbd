"""A bound on the shard files a process holds open: one pool of ArrayRecord readers per
process, shared by its threads and datasets, least recently used closed first.

    reader = READERS.checkout(key, open_)   # an idle reader of `key`, or a new one
    try:
        reader.read(records)                # this thread alone uses it meanwhile
    finally:
        READERS.checkin(key, reader)

Why: a reader holds one descriptor and its shard's record index (~100 KB at 12k
records) for as long as it is open. Kept per (thread, shard) for the loader's life, a
shuffled read over DROID's 1,845 shards would hold ~4,000 descriptors and ~400 MB per
worker process: past the common soft limit of 1,024 open files ("Too many open files").

A reader is checked out by one thread at a time (ArrayRecord readers are not used by two
threads at once), so only idle readers are ever evicted and closed; a thread that finds
every slot checked out waits for one to come back. The bound (`capacity`) comes from the
open-files soft limit (`ulimit -n`): half of what is left after `RESERVED_DESCRIPTORS`
for the process's other files, at most `MAX_OPEN_SHARDS`, or `JAXLOAD_MAX_OPEN_SHARDS`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from jaxload.errors import OpenFilesLimitError

MAX_OPEN_SHARDS = 256  # ~26 MB of record indexes at DROID's 12k records per shard
RESERVED_DESCRIPTORS = 64  # a trainer with jax, torch and Grain holds ~20-40 files
ENV_MAX_OPEN_SHARDS = "JAXLOAD_MAX_OPEN_SHARDS"
# Descriptors the training process holds per worker process: 8-9 measured (its open files
# after 10 batches, 2 against 4 workers, default buffers), with room for larger buffers.
WORKER_DESCRIPTORS = 10


def open_files_limit() -> int:
    """This process's soft limit on open files (`ulimit -n`)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)


def shard_capacity(limit: int | None = None) -> int:
    """How many shard readers a process keeps open under the soft limit `limit`."""
    limit = open_files_limit() if limit is None else limit
    budget = (limit - RESERVED_DESCRIPTORS) // 2
    override = max_open_shards_override()
    return max(0, min(MAX_OPEN_SHARDS if override is None else override, budget))


def max_open_shards_override() -> int | None:
    """JAXLOAD_MAX_OPEN_SHARDS as a count (None: unset); a ValueError naming it if it is
    not a positive integer."""
    value = os.environ.get(ENV_MAX_OPEN_SHARDS, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(
            f"{ENV_MAX_OPEN_SHARDS}={value!r}: give the number of shard files a process may "
            "keep open (a positive integer), or unset it for the default"
        )
    return int(value)


def check_open_files_limit(threads: int, workers: int = 0) -> None:
    """Raises OpenFilesLimitError when the soft limit leaves fewer shard readers than
    `threads` read threads (each read holds one), or too few descriptors in the training
    process for `workers` worker processes (pipes, semaphores and sockets, ~8-9 each).

    Args:
        threads: read threads per process.
        workers: worker processes the training process starts.

    Example:
        check_open_files_limit(threads=2, workers=4)  # make_loader's check
    """
    limit, capacity = open_files_limit(), shard_capacity()
    plural = "s" if threads != 1 else ""
    override = max_open_shards_override()
    if override is not None and override < threads:
        raise OpenFilesLimitError(
            f"{ENV_MAX_OPEN_SHARDS}={override} lets a process keep {override} shard file"
            f"{'s' if override != 1 else ''} open: too few for {threads} read thread{plural}, "
            f"which hold a shard file each while they read. Set it to at least {threads}, or "
            "unset it"
        )
    if capacity < threads:
        needed = RESERVED_DESCRIPTORS + 2 * threads  # the smallest limit these threads fit
        fewer = (
            f", or pass at most {capacity} read_threads (PipelineOptions)" if capacity > 0 else ""
        )
        raise OpenFilesLimitError(
            f"the open-files limit (ulimit -n) is {limit}: too low for {threads} read "
            f"thread{plural}, which hold a shard file each while they read (jaxload keeps "
            f"{RESERVED_DESCRIPTORS} descriptors for other files and half of the rest for "
            f"shard files: {capacity} here). Raise it to at least {needed} (`ulimit -n 1024`, "
            f"or resource.setrlimit(RLIMIT_NOFILE, ...) before make_loader){fewer}"
        )
    needed = RESERVED_DESCRIPTORS + WORKER_DESCRIPTORS * workers
    if limit < needed:
        raise OpenFilesLimitError(
            f"the open-files limit (ulimit -n) is {limit}: too low for {workers} worker "
            f"processes, for which the training process holds ~{WORKER_DESCRIPTORS} "
            f"descriptors each (pipes, semaphores, sockets) beside {RESERVED_DESCRIPTORS} for "
            f"its other files. Raise it to at least {needed} (`ulimit -n 1024`, or "
            "resource.setrlimit(RLIMIT_NOFILE, ...) before make_loader), or use fewer "
            "num_workers (PipelineOptions)"
        )


def out_of_descriptors(path: str, error: BaseException | None = None) -> OpenFilesLimitError:
    """The error for a shard that could not be opened because the process (EMFILE) or the
    system (ENFILE) has no descriptor left: it says so, and what holds them."""
    try:
        held = len(os.listdir("/proc/self/fd"))
    except OSError:
        held = -1  # listing needs a descriptor too
    holding = f"{held} open files" if held >= 0 else "every descriptor"
    return OpenFilesLimitError(
        f"{path}: cannot open: too many open files ({error or 'EMFILE'}). This process holds "
        f"{holding} under its limit (ulimit -n) of {open_files_limit()}, {READERS.open} of "
        "them jaxload's shard readers. Raise the limit (`ulimit -n 4096`), or find what "
        "else holds files open"
    )


def is_out_of_descriptors(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE)


class ReaderPool:
    """Readers by key (a dataset's token and a shard), at most `capacity` open at once.

    Args:
        capacity: readers open at once; None: `shard_capacity()` at first use.
    """

    def __init__(self, capacity: int | None = None):
        self._capacity = capacity
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Condition()
        self._idle: OrderedDict[Hashable, list[Any]] = OrderedDict()
        self.open = 0  # idle plus checked out

    @property
    def capacity(self) -> int:
        if self._capacity is None:
            self._capacity = max(1, shard_capacity())
        return self._capacity

    def checkout(self, key: Hashable, open_: Callable[[], Any]) -> Any:
        """An idle reader of `key`, else one `open_()` returns once a slot is free (the
        least recently used idle reader closed). Out of descriptors, every idle reader
        is closed and the open tried again once. The caller must `checkin` it."""
        capacity = self.capacity
        with self._lock:
            if stack := self._idle.get(key):
                reader = stack.pop()
                if not stack:
                    del self._idle[key]
                return reader
            while self.open >= capacity and not self._idle:
                self._lock.wait()
            evicted = self._evict(1 if self.open >= capacity else 0)
            self.open += 1
        self._close(evicted)
        try:
            try:
                return open_()
            except OpenFilesLimitError:
                self.drop(lambda _: True)
                return open_()
        except BaseException:
            with self._lock:
                self.open -= 1
                self._lock.notify()
            raise

    def checkin(self, key: Hashable, reader: Any) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(reader)
            self._idle.move_to_end(key)
            self._lock.notify()

    def drop(self, which: Callable[[Hashable], bool]) -> None:
        """Closes the idle readers whose key `which` accepts (checked out ones stay)."""
        with self._lock:
            keys = [k for k in self._idle if which(k)]
            readers = [r for k in keys for r in self._idle.pop(k)]
            self.open -= len(readers)
            self._lock.notify_all()
        self._close(readers)

    def _evict(self, count: int) -> list[Any]:
        """Takes `count` least recently used idle readers out (under the lock)."""
        evicted = []
        while len(evicted) < count and self._idle:
            key, stack = next(iter(self._idle.items()))
            evicted.append(stack.pop(0))
            if not stack:
                del self._idle[key]
        self.open -= len(evicted)
        return evicted

    @staticmethod
    def _close(readers: list[Any]) -> None:
        for reader in readers:
            with contextlib.suppress(Exception):  # a corrupt file's reader may raise
                reader.close()


READERS = ReaderPool()

# A child forked while another thread held the lock would wait for it forever; its
# checked-out readers belong to threads the child does not have. It starts empty (the
# parent's readers stay the parent's).
os.register_at_fork(after_in_child=READERS._reset)
