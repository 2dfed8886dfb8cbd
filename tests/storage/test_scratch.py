"""Directories a process owns (jaxload/storage/scratch.py): a later process removes those
whose owner died, and only those: never a live process's (in any pid namespace), another
host's, another kind's or the user's."""

import os
import signal
import subprocess
import sys

import pytest

from jaxload.storage import scratch

pytestmark = pytest.mark.processes  # owners are real processes, started and killed

HOST = scratch._host()


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def _made_by_a_killed_process(root, kind="jaxload-meta") -> str:
    code = (
        "import os, signal; from jaxload.storage.scratch import owned_directory; "
        f"d = owned_directory({kind!r}, {str(root)!r}); "
        "open(os.path.join(d, 'info.json'), 'w').write('{}'); print(d, flush=True); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout.strip()


def test_a_killed_processs_directory_is_removed_by_the_next_one(tmp_path):
    left = _made_by_a_killed_process(tmp_path)
    assert os.path.isdir(left)  # SIGKILL: no atexit, no finalizer
    mine = scratch.owned_directory("jaxload-meta", tmp_path)
    assert not os.path.exists(left)
    assert os.path.basename(mine).startswith(f"jaxload-meta-{os.getpid()}@{HOST}-")
    scratch.remove_owned(mine)
    assert not os.path.exists(mine)


def test_a_live_owner_keeps_its_directory_whatever_its_pid_says(tmp_path):
    # The lock, not the pid: a live process of another pid namespace (a container with the
    # host's hostname) has a pid that looks dead here. Named with a dead pid, held by us.
    live = scratch.owned_directory("jaxload-cache", tmp_path)
    renamed = tmp_path / os.path.basename(live).replace(str(os.getpid()), str(_dead_pid()), 1)
    os.rename(live, renamed)
    code = (
        "from jaxload.storage.scratch import remove_orphans; "
        f"print(remove_orphans({str(tmp_path)!r}, 'jaxload-cache'))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert other.stdout.strip() == "[]" and renamed.is_dir(), other.stderr


def test_only_this_kinds_directories_of_this_host_are_candidates(tmp_path):
    dead = _dead_pid()
    names = {
        "another host's": f"jaxload-meta-{dead}@{HOST}x-abcd1234",
        "another kind's": f"jaxload-stats-{dead}@{HOST}-abcd1234",
        "the user's": f"jaxload-meta-{dead}-backup1",
        "the user's, cache-like": "jaxload-cache-2024-backup",
        "odd pid": f"jaxload-meta-99999999999999999999@{HOST}-abcd1234",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_bytes(b"x")
    assert scratch.remove_orphans(tmp_path, "jaxload-meta") == []
    assert scratch.remove_orphans(tmp_path, "jaxload-cache") == []
    assert {p.name for p in tmp_path.iterdir()} == set(names.values())
    made = scratch.owned_directory("jaxload-meta", tmp_path)  # odd names do not stop it
    scratch.remove_owned(made)


def test_a_cache_directory_of_the_naming_before_the_lock_goes_when_its_pid_is_gone(tmp_path):
    old = tmp_path / f"jaxload-cache-{_dead_pid()}-abcd1234"
    alive = tmp_path / f"jaxload-cache-{os.getpid()}-abcd1234"
    for d in (old, alive):
        d.mkdir()
    assert scratch.remove_orphans(tmp_path, "jaxload-cache") == [old.name]
    assert alive.is_dir()


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_a_link_is_never_followed(tmp_path):
    target = tmp_path / "users-data"
    target.mkdir()
    (target / "keep").write_bytes(b"x")
    left = _made_by_a_killed_process(tmp_path / "root")
    os.rename(left, left + "-")  # out of the way; a link under its name instead
    os.symlink(target, left)
    scratch.remove_orphans(tmp_path / "root", "jaxload-meta")
    assert (target / "keep").exists()
