"""Directories a process owns (jaxload/storage/scratch.py): a later process removes those
whose owner died, and only those: never a live process's, another host's, or the user's."""

import os
import signal
import subprocess
import sys

from jaxload.storage import scratch


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def test_only_directories_of_dead_processes_of_this_host_are_removed(tmp_path):
    dead, host = _dead_pid(), scratch._host()
    names = {
        "dead": f"jaxload-meta-{dead}@{host}-x1",
        "dead, older naming": f"jaxload-meta-{dead}-x2",
        "alive": f"jaxload-meta-{os.getpid()}@{host}-x3",
        "another host's": f"jaxload-meta-{dead}@{host}x-x4",
        "another kind": f"jaxload-cache-{dead}@{host}-x5",
        "the user's": f"jaxload-meta-notes-{dead}",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_bytes(b"x")
    removed = scratch.remove_orphans(tmp_path, "jaxload-meta")
    assert sorted(removed) == sorted([names["dead"], names["dead, older naming"]])
    left = {p.name for p in tmp_path.iterdir()}
    assert left == set(names.values()) - set(removed)


def test_a_killed_processs_directory_is_removed_by_the_next_one(tmp_path):
    code = (
        "import os, signal, sys; from jaxload.storage.scratch import owned_directory; "
        f"d = owned_directory('jaxload-meta', {str(tmp_path)!r}); "
        "open(os.path.join(d, 'info.json'), 'w').write('{}'); print(d, flush=True); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL
    left = done.stdout.strip()
    assert os.path.isdir(left)  # SIGKILL: no atexit, no finalizer
    mine = scratch.owned_directory("jaxload-meta", tmp_path)
    assert not os.path.exists(left)
    assert os.path.basename(mine).startswith(f"jaxload-meta-{os.getpid()}@")
