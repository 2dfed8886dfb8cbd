"""Temporary directories a process owns, which a later process removes when their owner
died without doing so (SIGKILL, the OOM killer), and only then.

    local = owned_directory("jaxload-workers")              # under the temporary directory
    cache = owned_directory("jaxload-cache", "/nvme/cache")   # jaxload-cache-<pid>@<host>-…
    ...
    remove_owned(cache)                                      # the owner, when done

Who is alive is asked of the kernel, not guessed from the pid in the name: the owner
holds an exclusive `flock` on the directory's `.owner` file while it lives, and the kernel
drops it when the process ends, however it ends. A pid says nothing across pid namespaces
(containers with the host's hostname, `hostNetwork` pods) and hosts. The host in the name
keeps a shared disk's other hosts out of it as well (NFS locks are less sure than local
ones). Names this module did not make (a user's directory, another kind's) never match.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import socket
import tempfile

log = logging.getLogger(__name__)

OWNER = ".owner"
_held: dict[str, int] = {}  # directory -> the fd whose lock says its owner lives


def owned_directory(kind: str, root: str | os.PathLike | None = None) -> str:
    """A new directory `<kind>-<pid>@<host>-…` under `root` (default: the temporary
    directory), locked as this process's, made after removing the dead owners' of `kind`."""
    root = os.fspath(root) if root is not None else tempfile.gettempdir()
    os.makedirs(root, exist_ok=True)
    try:
        remove_orphans(root, kind)
    except Exception as e:  # another process's leftovers never stop this one
        log.debug("could not remove old %s directories under %s: %s", kind, root, e)
    directory = tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}@{_host()}-", dir=root)
    # Locked under another name, then renamed: a remover never finds `.owner` unlocked.
    fd = os.open(os.path.join(directory, OWNER + ".new"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(os.path.join(directory, OWNER + ".new"), os.path.join(directory, OWNER))
    _held[directory] = fd
    return directory


def remove_owned(directory: str) -> None:
    """Removes a directory `owned_directory` made, and lets go of its lock."""
    shutil.rmtree(directory, ignore_errors=True)
    fd = _held.pop(directory, None)
    if fd is not None:
        os.close(fd)


def remove_orphans(root: str | os.PathLike, kind: str) -> list[str]:
    """Removes the directories of `kind` under `root` made by `owned_directory` on this
    host whose owner is gone; returns their names. `jaxload-cache` directories of the
    naming before the lock (`jaxload-cache-<pid>-…`, no host) go when their pid is gone."""
    root = os.fspath(root)
    owned = re.compile(rf"{re.escape(kind)}-(\d+)@{re.escape(_host())}-[a-z0-9_]{{8}}")
    legacy = re.compile(r"jaxload-cache-(\d+)-[a-z0-9_]{8}") if kind == "jaxload-cache" else None
    removed = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if owned.fullmatch(name):
            dead = _mine(path) and _unlocked(path)
        elif legacy is not None and (match := legacy.fullmatch(name)):
            dead = _mine(path) and not process_alive(int(match[1]))
        else:
            continue
        if dead and path not in _held:
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                removed.append(name)
    return removed


def _mine(path: str) -> bool:
    """A real directory (not a link) of this user."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return os.path.isdir(path) and not os.path.islink(path) and st.st_uid == os.getuid()


def _unlocked(directory: str) -> bool:
    """Nobody holds the lock of `directory` (its owner ended). One without a lock file
    (being made this moment) counts as held."""
    try:
        fd = os.open(os.path.join(directory, OWNER), os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)  # releases the lock just taken
    return True


def process_alive(pid: int) -> bool:
    """Whether `pid` is a running process of this pid namespace (a zombie is dead: it
    only awaits its reaping). Another user's counts as running, and so does a number no
    process can have (not ours to judge)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True  # another user's (PermissionError), or no pid at all
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _host() -> str:
    """This host's name, as a directory name can hold it (no '-': the name's separator)."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


__all__ = ["owned_directory", "process_alive", "remove_orphans", "remove_owned"]
