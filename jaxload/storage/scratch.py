"""Temporary directories a process owns: named by its host and pid, so that a later
process on the same host removes them when their owner died without doing so (SIGKILL,
the OOM killer), and never removes another host's (a `cache_dir` on a shared disk) or a
live process's.

    local = owned_directory("jaxload-meta")                 # under the temporary directory
    cache = owned_directory("jaxload-cache", "/nvme/cache")   # jaxload-cache-<pid>@<host>-…

The owner removes its directory itself (at exit, or when done with it); this module only
names it and clears what dead owners left.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile


def owned_directory(kind: str, root: str | os.PathLike | None = None) -> str:
    """A new directory `<kind>-<pid>@<host>-…` under `root` (default: the temporary
    directory), made after removing those of `kind` whose process is gone."""
    root = os.fspath(root) if root is not None else tempfile.gettempdir()
    os.makedirs(root, exist_ok=True)
    remove_orphans(root, kind)
    return tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}@{_host()}-", dir=root)


def remove_orphans(root: str | os.PathLike, kind: str) -> list[str]:
    """Removes the directories of `kind` under `root` that a process of this host made and
    that is gone (and those of the older naming, without a host); returns their names."""
    owned = re.compile(rf"{re.escape(kind)}-(\d+)(?:@{re.escape(_host())})?-")
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        match = owned.match(name)
        if match is None or not _gone(int(match[1])):
            continue
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        removed.append(name)
    return removed


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    return False


def _host() -> str:
    """This host's name, as a directory name can hold it."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


__all__ = ["owned_directory", "remove_orphans"]
