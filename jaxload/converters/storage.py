"""What a conversion says when the output cannot be written: OUT is a file or lies under
one, the disk is full, the filesystem is read-only, permission is denied. Each becomes a
JaxloadError saying what a rerun will do (the work already done is kept)."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

from jaxload.errors import JaxloadError, RemoteError, SourceError

INTERRUPTED = "rerun the same command to resume: the episodes already converted are kept"


def check_out(out: Path) -> None:
    """OUT must be a directory to be (an existing file, even empty, is not "not empty"),
    and not under a file."""
    if out.exists() and not out.is_dir():
        raise JaxloadError(
            f"{out}: is a file, not a directory; nothing was written. Give a new directory, "
            "or an empty one, as OUT"
        )
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise JaxloadError(
                    f"{out}: cannot be created under {parent}, a file; nothing was written"
                )
            return


@contextlib.contextmanager
def storage_errors(out: str) -> Iterator[None]:
    """Turns a full disk or an unwritable OUT (raised by Python, pyarrow or ArrayRecord, in
    this process or a worker) into a JaxloadError that says what a rerun does."""
    try:
        yield
    except Exception as e:
        message = _storage_message(e, out)
        if message is None:
            raise
        raise JaxloadError(message) from e


def _storage_message(error: BaseException, out: str) -> str | None:
    for e in _chain(error):
        # Reading the source, or a request to remote storage, failed: its own message says
        # so. (A RemoteError's cause may be an s3fs PermissionError with errno EACCES, which
        # is no local permission problem.)
        if isinstance(e, SourceError | RemoteError):
            return None
        code, text = getattr(e, "errno", None), str(e)
        if code in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in text:
            return f"no space left on device ({text}). Free some space, then {INTERRUPTED}"
        if code == errno.EROFS or "Read-only file system" in text:
            return f"{out}: read-only file system ({text}). Once it is writable, {INTERRUPTED}"
        if code in (errno.EACCES, errno.EPERM):
            return f"permission denied ({text}). Fix the permissions, then {INTERRUPTED}"
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error and its causes (a worker's error arrives as the cause of another)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__
