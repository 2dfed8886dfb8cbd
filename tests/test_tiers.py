"""The suite's tiers (tests/conftest.py): a fast test that starts a process fails, however
it starts it; `processes` puts a test in the integration tier, where it may start them.

The checks run pytest on small test files (pytester, in this process) with this suite's
own conftest.py and markers.
"""

import multiprocessing.process
import os
import subprocess
import tomllib

import pytest

from tests import conftest
from tests.conftest import REPO_ROOT

MARKERS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
    "ini_options"
]["markers"]

CASES = """
import multiprocessing
import os
import subprocess
from concurrent.futures import ProcessPoolExecutor

import pytest


def test_subprocess_run():
    subprocess.run(["true"], check=True)


def test_multiprocessing_process():
    p = multiprocessing.get_context("spawn").Process(target=print)
    p.start()
    p.join()


def test_process_pool():
    with ProcessPoolExecutor(1) as pool:
        assert pool.submit(abs, -1).result() == 1


def test_fork():
    if os.fork() == 0:
        os._exit(0)


def test_os_system():
    assert os.system("true") == 0


def test_a_caught_refusal_still_fails():
    try:
        subprocess.check_output(["true"])
    except Exception:
        pass


@pytest.fixture(scope="module")
def server():
    return subprocess.Popen(["sleep", "60"])


def test_a_fixture_that_starts_a_process(server):
    pass


def test_in_process():
    assert sum(range(4)) == 6
"""


@pytest.fixture
def suite(pytester):
    """A directory with this suite's conftest.py and markers."""
    pytester.makeconftest((REPO_ROOT / "tests" / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {m}\n" for m in MARKERS))
    return pytester


def test_a_fast_test_that_starts_a_process_fails(suite):
    suite.makepyfile(test_cases=CASES)
    result = suite.runpytest("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 6 and outcomes.get("errors") == 1, outcomes
    assert outcomes.get("passed") == 1, outcomes
    report = result.stdout.str()
    for name in ("test_subprocess_run", "test_multiprocessing_process", "test_process_pool",
                 "test_fork", "test_os_system", "test_a_caught_refusal_still_fails",
                 "test_a_fixture_that_starts_a_process"):  # fmt: skip
        assert f"test_cases.py::{name}" in report
    assert "this test starts a process (a subprocess): mark it `processes`" in report
    assert "this test starts a process (a multiprocessing process)" in report
    assert "this test starts a process (a fork)" in report
    assert "this test starts a process (a shell (os.system))" in report
    assert "ERROR at setup of test_a_fixture_that_starts_a_process" in report


def test_the_refusal_ends_with_the_test():
    # The functions that start processes are this process's own again after a refused block.
    before = [getattr(owner, name) for owner, name, _ in conftest.PROCESS_STARTS]
    refused = []
    with (
        pytest.raises(conftest.ProcessStartRefused, match="mark it `processes`"),
        conftest.refuse_process_starts("t", refused),
    ):
        subprocess.run(["true"])
    assert len(refused) == 1
    assert [getattr(owner, name) for owner, name, _ in conftest.PROCESS_STARTS] == before
    assert subprocess.Popen.__init__ is before[0]
    assert multiprocessing.process.BaseProcess.start is before[1] and os.fork is before[2]


@pytest.mark.processes
def test_processes_tests_are_integration_and_may_start_processes(suite):
    suite.makepyfile(
        test_cases="""
        import subprocess

        import pytest


        @pytest.mark.processes
        def test_marked_processes():
            subprocess.run(["true"], check=True)


        @pytest.mark.integration
        def test_marked_integration():
            subprocess.run(["true"], check=True)


        def test_in_process():
            pass
        """
    )
    suite.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=3)
    fast = suite.runpytest("-p", "no:cacheprovider", "-m", "not integration")
    fast.assert_outcomes(passed=1, deselected=2)
