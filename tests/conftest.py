"""Shared pytest set-up: the shared LeRobot fixtures, and the two tiers of the suite.

Tiers (markers declared in pyproject.toml):

* `integration`: end to end or slow (conversions, benchmarks, examples, real servers);
* `processes`: the test starts a process (Grain worker processes, a subprocess, a
  multiprocessing pool or process, a fork). A `processes` test is also `integration`
  (added here).

The fast tier is `pytest -m "not integration"`. A test outside both markers that starts a
process fails, in its set-up (fixtures included) or its call: the functions that start
processes refuse while it runs (`refuse_process_starts`), and a refusal the test catches
still fails it. multiprocessing's resource tracker, which the standard library starts once
per interpreter for shared memory, is not a test's process and is not refused.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing.process
import os
import subprocess
from pathlib import Path

import pytest
from absl import flags

# Grain's worker processes read absl flags; pytest never parses them.
flags.FLAGS.mark_as_parsed()

pytest_plugins = ["pytester"]  # tests/test_tiers.py runs pytest on pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_LEROBOT = REPO_ROOT.parent / "shared" / "data" / "lerobot"


@pytest.fixture(scope="session")
def shared_lerobot() -> Path:
    """The read-only LeRobot v3.0 fixtures (written by lerobot 0.4.4); skip when absent."""
    if not (SHARED_LEROBOT / "README.md").exists():
        pytest.skip(f"shared LeRobot fixtures not found at {SHARED_LEROBOT}")
    return SHARED_LEROBOT


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # Before `-m` deselects: a test that starts processes is never in the fast tier.
    for item in items:
        if item.get_closest_marker("processes"):
            item.add_marker(pytest.mark.integration)


class ProcessStartRefused(RuntimeError):
    """A fast-tier test started (tried to start) a process."""


# (owner, attribute, what it starts): every way a test starts a process goes through one.
# subprocess.run/call/check_output and os.popen make a Popen; multiprocessing's Process,
# Pool and ProcessPoolExecutor start a BaseProcess (so do Grain's mp_prefetch workers);
# os.spawn* and pty.fork call os.fork/os.forkpty.
PROCESS_STARTS = (
    (subprocess.Popen, "__init__", "a subprocess"),
    (multiprocessing.process.BaseProcess, "start", "a multiprocessing process"),
    (os, "fork", "a fork"),
    (os, "forkpty", "a fork"),
    (os, "posix_spawn", "a process (posix_spawn)"),
    (os, "posix_spawnp", "a process (posix_spawnp)"),
    (os, "system", "a shell (os.system)"),
)


def refusal_message(nodeid: str, what: str) -> str:
    return (
        f"this test starts a process ({what}): mark it `processes` (which puts it in the "
        f"integration tier) or keep it in-process [{nodeid}]"
    )


@contextlib.contextmanager
def refuse_process_starts(nodeid: str, refused: list[str]):
    """Every function of PROCESS_STARTS raises ProcessStartRefused (and appends its
    message to `refused`) while the block runs; the previous functions come back after."""
    saved = []

    def refusing(original, what):
        @functools.wraps(original)
        def refuse(*args, **kwargs):
            __tracebackhide__ = True
            message = refusal_message(nodeid, what)
            refused.append(message)
            raise ProcessStartRefused(message)

        return refuse

    for owner, name, what in PROCESS_STARTS:
        original = getattr(owner, name)
        saved.append((owner, name, original))
        setattr(owner, name, refusing(original, what))
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def _fast(item) -> bool:
    return not (item.get_closest_marker("integration") or item.get_closest_marker("processes"))


def _guarded(item):
    """A phase of a fast test, with process starts refused; fails it if it tried one."""
    if not _fast(item):
        return (yield)
    refused: list[str] = []
    try:
        with refuse_process_starts(item.nodeid, refused):
            result = yield
    except ProcessStartRefused:
        raise
    except BaseException as error:
        if refused:  # the refusal was caught and something else raised
            raise ProcessStartRefused(refused[0]) from error
        raise
    if refused:  # the refusal was caught and the test went on
        pytest.fail(refused[0], pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item))
