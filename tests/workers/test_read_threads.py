"""Reads that fail or never end (jaxload.workers.read_threads and the loader around it):
a failed read is read again by the next next(), never skipped; a read stuck in a
`batch_transform` never keeps the process from exiting."""

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jaxload import PipelineOptions, make_loader
from jaxload.workers.read_threads import DaemonReads, ReadsReleased
from tests.pipeline.test_loader import assert_batches_equal
from tests.support.fake_dataset import FakeDataset
from tests.support.fault_helpers import FailsOnce

REPO = Path(__file__).resolve().parents[2]
KW = dict(global_batch_size=4, seed=3, host_index=0, host_count=1)


def test_a_read_that_failed_is_read_again_by_the_next_next(tmp_path):
    """Before, the batch whose read raised was dropped: the next next() served the batch
    after it while `position` counted the failed one as served."""
    ds = FakeDataset([9, 1, 14, 4, 7, 17, 3])
    options = PipelineOptions(num_workers=0, read_threads=2)
    reference = make_loader(ds, options=options, **KW)
    want = [next(reference) for _ in range(10)]
    flag = tmp_path / "flag"
    flag.touch()
    loader = make_loader(
        ds, options=options, batch_transform=FailsOnce(str(flag), want[4]["index"][0]), **KW
    )
    got = [next(loader) for _ in range(4)]
    with pytest.raises(OSError, match="transient failure"):
        next(loader)
    assert loader.get_state()["position"] == 16
    while len(got) < len(want):
        got.append(next(loader))
        assert loader.get_state()["position"] == 4 * len(got)
    assert_batches_equal(got, want)
    loader.close()


def test_release_ends_the_wait_on_a_stuck_read_and_refuses_new_ones():
    reads = DaemonReads()
    stuck = threading.Event()
    assert reads.run(lambda x: x + 1, 1) == 2
    with pytest.raises(ZeroDivisionError):
        reads.run(lambda: 1 / 0)
    outcome = []

    def waiter():
        try:
            reads.run(stuck.wait)
        except ReadsReleased as e:
            outcome.append(e)

    thread = threading.Thread(target=waiter)  # a non-daemon thread, as Grain's are
    thread.start()
    time.sleep(0.2)
    reads.release()
    thread.join(5)
    assert not thread.is_alive() and outcome
    with pytest.raises(ReadsReleased):
        reads.run(lambda: 1)
    runners = [t for t in threading.enumerate() if t.name.startswith("jaxload-read-")]
    assert runners and all(t.daemon for t in runners)
    stuck.set()


@pytest.mark.processes
@pytest.mark.parametrize("mode", ["timeout", "close"])
def test_a_read_stuck_in_a_batch_transform_never_keeps_the_process_from_exiting(mode):
    """Before, Grain's read thread stuck in the transform was joined at exit: the process
    never ended, after WorkerTimeoutError and close() or after close() alone."""
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.stuck_reader", mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "CLOSED" in run.stdout
    if mode == "timeout":
        assert "TIMEOUT" in run.stdout


@pytest.mark.processes
def test_reads_running_at_exit_end_before_the_interpreter(shared_lerobot, tmp_path):
    """Reads moved to daemon threads were left decoding while the interpreter ended: about
    one exit in three aborted ("terminate called without an active exception", status
    134). Exit now waits for them, as it waited for Grain's read threads."""
    from jaxload.converters.convert import convert

    dataset = tmp_path / "ds"
    convert(shared_lerobot / "h264_single", dataset, workers=1, progress=False)
    for _ in range(5):
        run = subprocess.run(
            [sys.executable, "-m", "tests.support.stuck_reader", "exit", str(dataset)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0 and "CLOSED" in run.stdout, run.stderr[-2000:]
        assert "terminate called" not in run.stderr
