"""One converter per output: an exclusive `flock` on a file in the partial directory.

The lock is held for the whole run and released by the kernel when the process exits,
however it exits (SIGKILL included), so a crashed converter never leaves a stale lock
behind and the next run resumes at once. A second converter on the same output is
refused with the holder's pid and host instead of interleaving its writes.

Example:
    >>> with JobLock(Path("out/.demo.partial"), what="out/demo"):
    ...     pass  # convert
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from jaxload.errors import JaxloadError

LOCK_NAME = "lock"


class ConversionLocked(JaxloadError):
    """Another converter holds the output's lock."""


class JobLock:
    """An exclusive, non-blocking flock on `<directory>/lock` (the directory is created)."""

    def __init__(self, directory: Path, *, what: str):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.what = what
        self._fd: int | None = None

    def __enter__(self) -> JobLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        while True:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise ConversionLocked(
                    f"{self.what}: another `jaxload convert` ({holder}) is writing this "
                    f"output (lock {self.path}); wait for it to finish, or stop it and rerun "
                    "this command to resume its work"
                ) from None
            # A finishing converter deletes the directory, lock file included, while holding
            # the lock: if our file is no longer the one at the path, start over.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {stamp}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def _read_holder(fd: int) -> str:
    """The holder's "pid N on HOST, since ..." (it writes it right after locking)."""
    for _ in range(20):
        text = os.pread(fd, 256, 0).decode(errors="replace").strip()
        if text:
            return text
        time.sleep(0.05)
    return "pid unknown"
