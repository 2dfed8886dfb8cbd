"""converters/lock.py: one converter per output. A second JobLock on the same directory
(another open file description: flock treats it as another process) is refused naming
the holder; the lock is free again once released, also when its directory was removed."""

from __future__ import annotations

import os
import shutil
import socket

import pytest

from jaxload.converters.lock import ConversionLocked, JobLock


def test_a_second_converter_is_refused_naming_the_holder(tmp_path):
    partial = tmp_path / ".out.partial"
    with JobLock(partial, what="out") as held:
        text = held.path.read_text()
        assert text.startswith(f"pid {os.getpid()} on {socket.gethostname()}, since ")
        with pytest.raises(
            ConversionLocked,
            match=rf"^out: another `jaxload convert` \(pid {os.getpid()} on .*\) is writing this output \(lock .*\.out\.partial/lock\)",
        ):
            JobLock(partial, what="out").acquire()
    with JobLock(partial, what="out"):  # released: the next run takes it at once
        pass


def test_a_lock_whose_directory_was_removed_is_taken_afresh(tmp_path):
    partial = tmp_path / ".out.partial"
    first = JobLock(partial, what="out")
    first.acquire()
    shutil.rmtree(partial)  # a finishing converter removes its partial directory
    second = JobLock(partial, what="out")
    second.acquire()  # a new lock file: not blocked by the removed one's holder
    assert second.path.is_file()
    second.release()
    first.release()
    first.release()  # twice is harmless
