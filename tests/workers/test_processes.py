"""Process faults around a loader, with real worker processes on a converted LeRobot
fixture: a stopped worker, a killed trainer, a killed process group, a transform that
breaks its contract in a worker."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import jaxload
from jaxload import PipelineOptions, make_loader
from jaxload.converters.convert import convert
from jaxload.errors import BatchTransformError, WorkerDiedError, WorkerTimeoutError
from jaxload.workers import fork_server, shared_batch
from jaxload.workers import processes as workers_module
from tests.pipeline.test_loader import assert_batches_equal
from tests.support import fault_helpers

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]
WINDOW = {"observation.image": [-0.1, 0.0], "action": [0.0, 0.1]}
KW = dict(global_batch_size=4, seed=5, delta_timestamps=WINDOW, host_index=0, host_count=1)


@pytest.fixture(scope="module")
def dataset(shared_lerobot, tmp_path_factory):
    out = tmp_path_factory.mktemp("worker_faults") / "h264_single"
    convert(shared_lerobot / "h264_single", out, workers=1, progress=False)
    return out


def _within(seconds: float, condition) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _running(pid: int) -> bool:
    """Alive and not a zombie (a dead child waiting to be reaped is not running)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError):
                continue
    return out


def _segments(pid: int) -> set[str]:
    prefix = shared_batch.segment_prefix(pid)
    return {n for n in os.listdir(shared_batch.SHM_DIR) if n.startswith(prefix)}


def _semaphores_mapped_by(pids: list[int]) -> set[str]:
    """The sem.mp-* files in /dev/shm that these processes have mapped (by inode)."""
    inodes = set()
    for pid in pids:
        with open(f"/proc/{pid}/maps") as f:
            inodes |= {int(line.split()[4]) for line in f if "/dev/shm/" in line}
    names = set()
    for name in os.listdir(shared_batch.SHM_DIR):
        if name.startswith("sem.mp-"):
            try:
                if os.stat(os.path.join(shared_batch.SHM_DIR, name)).st_ino in inodes:
                    names.add(name)
            except FileNotFoundError:
                continue
    return names


def _grain_workers() -> list:
    """This process's Grain worker processes (multiprocessing's objects), by pid."""
    children = multiprocessing.active_children()
    return sorted((p for p in children if p.name.startswith("grain-process")), key=lambda p: p.pid)


@pytest.fixture(autouse=True)
def earlier_workers_gone():
    """These tests count, stop and kill this process's workers: an earlier test's pipeline
    may still be closing in the background (a worker exits within a few seconds), and taken
    for one of this test's loader it made the count wrong or the kill hit the wrong one."""
    assert _within(30, lambda: not _grain_workers() and not workers_module.worker_pids())


def test_a_stopped_worker_raises_naming_it_and_the_loader_resumes(dataset):
    reference = make_loader(dataset, options=PipelineOptions(num_workers=0), **KW)
    want = [next(reference) for _ in range(14)]
    options = PipelineOptions(
        num_workers=2, read_threads=1, worker_buffer_size=1, prefetch=1, worker_timeout_s=3
    )
    loader = make_loader(dataset, options=options, **KW)
    got = [next(loader) for _ in range(2)]  # both workers started
    workers = _grain_workers()
    assert len(workers) == 2
    stopped = workers[1].pid
    os.kill(stopped, signal.SIGSTOP)
    try:
        with pytest.raises(WorkerTimeoutError) as caught:
            for _ in range(20):  # what the workers had read ahead, then the stopped one's turn
                got.append(next(loader))
        message = str(caught.value)
        assert f"(pid {stopped}) delivered no batch for 3 s" in message, message
        assert f"reading batch {len(got)} (global positions {4 * len(got)}.." in message
        assert "episodes [" in message and "next() restarts them" in message
        assert _within(10, lambda: not _running(stopped))  # the loader killed it
    finally:
        if _running(stopped):
            os.kill(stopped, signal.SIGKILL)
    while len(got) < len(want):  # same position, new workers
        got.append(next(loader))
    assert_batches_equal(got, want)
    loader.close()


def test_a_killed_worker_raises_naming_it_and_no_batch_is_skipped(dataset):
    """SIGKILL, what the OOM killer sends: before, the first next() raised Grain's bare
    RuntimeError and every later one skipped the dead worker's batches while `position`
    counted them. Now a WorkerDiedError names the worker, the signal and the batch it
    held; the next next() starts new workers at the position not yet served, and every
    batch equals the undisturbed run's at the same position, with `get_state` exact."""
    reference = make_loader(dataset, options=PipelineOptions(num_workers=0), **KW)
    want = [next(reference) for _ in range(16)]
    options = PipelineOptions(num_workers=2, read_threads=1, worker_buffer_size=1, prefetch=1)
    loader = make_loader(dataset, options=options, **KW)
    got = [next(loader) for _ in range(2)]  # both workers started
    workers = _grain_workers()
    assert len(workers) == 2
    killed = workers[0].pid
    os.kill(killed, signal.SIGKILL)
    with pytest.raises(WorkerDiedError) as caught:
        for _ in range(20):  # what was read ahead, then the dead one's turn
            got.append(next(loader))
    message = str(caught.value)
    assert f"(pid {killed}) was killed by signal 9 (SIGKILL, e.g. by the OOM killer)" in message
    assert f"next() restarts them at position {4 * len(got)}" in message, message
    assert loader.get_state()["position"] == 4 * len(got)
    while len(got) < len(want):  # same position, new workers
        got.append(next(loader))
        assert loader.get_state()["position"] == 4 * len(got)
    assert_batches_equal(got, want)
    loader.close()


def test_a_killed_worker_collected_by_someone_else_is_named_and_no_batch_is_skipped(
    dataset, monkeypatch
):
    """The issue's case: when something else collects the dead worker's exit status before
    the loader's watch does (`multiprocessing.active_children()`, `Process.exitcode`, or
    Grain itself a second later), the first next() raised Grain's bare RuntimeError and
    every later one skipped every other batch while `position` counted them consecutive."""
    monkeypatch.setattr(workers_module, "WATCH_INTERVAL_S", 3600.0)  # the test collects first
    reference = make_loader(dataset, options=PipelineOptions(num_workers=0), **KW)
    want = [next(reference) for _ in range(16)]
    options = PipelineOptions(num_workers=2, read_threads=1, worker_buffer_size=1, prefetch=1)
    loader = make_loader(dataset, options=options, **KW)
    got = [next(loader) for _ in range(3)]
    workers = _grain_workers()
    killed = workers[0]
    os.kill(killed.pid, signal.SIGKILL)
    assert _within(10, lambda: killed.exitcode is not None)  # collected here, not by the loader
    assert killed.exitcode == -signal.SIGKILL
    with pytest.raises(WorkerDiedError) as caught:
        for _ in range(20):
            got.append(next(loader))
    error = caught.value
    assert f"(pid {killed.pid}) was killed by signal 9 (SIGKILL" in str(error), str(error)
    assert (error.pid, error.signal, error.status) == (killed.pid, signal.SIGKILL, None)
    assert error.position == 4 * len(got) and loader.get_state()["position"] == 4 * len(got)
    while len(got) < len(want):
        got.append(next(loader))
        assert loader.get_state()["position"] == 4 * len(got)
    assert_batches_equal(got, want)
    loader.close()


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_a_worker_killed_while_it_starts_is_named_and_no_batch_is_skipped(
    dataset, monkeypatch, start
):
    """Found by the soak: a worker SIGKILLed before Grain ran its worker_init_fn (while it
    imports, seconds on a busy machine) is known by no pid, and its death came out as
    Grain's bare RuntimeError."""
    # Spawned, a worker imports for seconds before it says who it is; forked from the fork
    # server it may have read batches already when the kill lands (either way it is named):
    # 12 batches so that its death is reached whatever it read ahead.
    monkeypatch.setenv(fork_server.START_ENV, start)
    reference = make_loader(dataset, options=PipelineOptions(num_workers=0), **KW)
    want = [next(reference) for _ in range(12)]
    options = PipelineOptions(num_workers=2, read_threads=1, worker_buffer_size=1, prefetch=1)
    # Earlier loaders' workers gone first: a closed loader's worker forked late (a restart
    # under way) would otherwise be taken for one of this loader's.
    assert _within(30, lambda: not workers_module.worker_pids())
    earlier = set(workers_module.worker_pids())
    loader = make_loader(dataset, options=options, **KW).start()
    assert _within(30, lambda: len(set(workers_module.worker_pids()) - earlier) == 2)
    registry = loader._workers
    starting = sorted(set(workers_module.worker_pids()) - earlier)
    # Usually before it said who it is (while it imports); on an idle machine it may have
    # said so already: either way its death is named and no batch is skipped.
    assert registry is not None
    os.kill(starting[0], signal.SIGKILL)
    got = []
    with pytest.raises(WorkerDiedError, match=r"was killed by signal 9") as caught:
        while len(got) < len(want):
            got.append(next(loader))
    assert caught.value.signal == signal.SIGKILL
    assert caught.value.position == 4 * len(got) == loader.get_state()["position"]
    while len(got) < len(want):
        got.append(next(loader))
    assert_batches_equal(got, want)
    loader.close()


def test_an_error_a_worker_forwards_leaves_no_batch_skipped(dataset, tmp_path):
    """A worker's read that raises (here a transform failing once) is raised by next(); the
    next next() reads that batch again. Before, Grain dropped that worker: the loader went
    on serving every other batch while `position` counted them consecutive."""
    reference = make_loader(dataset, options=PipelineOptions(num_workers=0), **KW)
    want = [next(reference) for _ in range(12)]
    flag = tmp_path / "flag"
    flag.touch()
    options = PipelineOptions(num_workers=2, read_threads=1, worker_buffer_size=1, prefetch=1)
    transform = fault_helpers.FailsOnce(str(flag), want[5]["index"][0])
    loader = make_loader(dataset, options=options, batch_transform=transform, **KW)
    got = []
    with pytest.raises(OSError, match="transient failure"):
        while len(got) < len(want):
            got.append(next(loader))
    assert not flag.exists() and loader.get_state()["position"] == 4 * len(got)
    while len(got) < len(want):
        got.append(next(loader))
        assert loader.get_state()["position"] == 4 * len(got)
    assert_batches_equal(got, want)
    loader.close()


def _start_trainer(dataset: Path, **popen) -> tuple[subprocess.Popen, int]:
    trainer = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fault_helpers", str(dataset)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        **popen,
    )
    line = trainer.stdout.readline()
    assert line.startswith("READY"), line
    return trainer, int(line.split()[1])


def test_workers_exit_and_shared_memory_is_freed_when_the_trainer_is_killed(dataset):
    trainer, pid = _start_trainer(dataset)
    try:
        # The resource tracker and the fork server (its children: the 2 workers).
        assert _within(30, lambda: len(workers_module.worker_pids(pid)) == 2)
        children = [*_children(pid), *workers_module.worker_pids(pid)]
        assert len(children) == 4
        assert _within(30, lambda: _segments(pid))  # batches read ahead, in named slots
        semaphores = _semaphores_mapped_by([pid, *children])
        assert semaphores
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
        assert _within(15, lambda: not any(_running(c) for c in children))
        assert _within(15, lambda: not _segments(pid))
        assert _within(15, lambda: not semaphores & set(os.listdir(shared_batch.SHM_DIR)))
    finally:
        trainer.kill()
        trainer.wait()


def test_the_next_loader_start_reclaims_what_a_killed_process_group_left(dataset, monkeypatch):
    # A scheduler's kill takes the trainer, its workers and the resource tracker at once:
    # nobody is left to clean /dev/shm. The next loader start on this machine does.
    monkeypatch.setenv("JAXLOAD_RECLAIM_SHM", "1")  # also inside a container's namespaces
    trainer, pid = _start_trainer(dataset, start_new_session=True)
    try:
        assert _within(30, lambda: len(workers_module.worker_pids(pid)) == 2)
        group = [pid, *_children(pid), *workers_module.worker_pids(pid)]
        assert _within(30, lambda: _segments(pid))
        semaphores = _semaphores_mapped_by(group)
        assert semaphores
        os.killpg(pid, signal.SIGKILL)
        trainer.wait()
        assert _within(15, lambda: not any(_running(p) for p in group))
        left = _segments(pid)
        assert left and semaphores <= set(os.listdir(shared_batch.SHM_DIR))
        time.sleep(2.5)  # semaphores are reclaimed once a moment old
        loader = make_loader(dataset, options=PipelineOptions(num_workers=0), **KW).start()
        loader.close()
        assert not _segments(pid)
        assert not semaphores & set(os.listdir(shared_batch.SHM_DIR))
    finally:
        if trainer.poll() is None:
            os.killpg(pid, signal.SIGKILL)
            trainer.wait()


def test_a_broken_batch_transform_in_a_worker_is_named(dataset):
    loader = make_loader(
        dataset,
        options=PipelineOptions(num_workers=2),
        batch_transform=fault_helpers.returns_none,
        **KW,
    )
    with pytest.raises(BatchTransformError, match="returns_none returned NoneType"):
        next(loader)
    loader.close()


def test_a_closed_pipelines_worker_stops_reading(tmp_path):
    """What a worker does when the training process closes its pipeline (the registry's
    directory goes): its reads raise at once instead of reading and decoding the batches
    its read threads queued (Grain stops workers one after another, each after its queued
    work: minutes on a GPU host). One look of the worker's watch, run in this process."""
    from jaxload.workers import processes as workers

    directory = tmp_path / "registry"
    directory.mkdir()
    try:
        assert not workers._orphaned(os.getppid(), str(directory))
        workers.raise_if_pipeline_closed()  # open: reads go on
        directory.rmdir()
        assert not workers._orphaned(os.getppid(), str(directory))  # the watch goes on
        with pytest.raises(workers.PipelineClosed):
            workers.raise_if_pipeline_closed()
    finally:
        workers._pipeline_closed.clear()


def test_shared_tables_changed_under_a_loader_are_written_again_not_refused_forever(dataset):
    """Issue #44: /dev/shm/jaxload_<pid>_<hex> (a dataset's tables, mapped by every worker)
    written by another process of the user: every worker start raised a raw ValueError,
    again and again, since the training process handed out the same file (and its own
    tables, views of that file, changed with it). Now the training process checks the file
    when it pickles the dataset again and writes a fresh one: the next loader's batches are
    the undisturbed run's."""
    ds = jaxload.open(dataset, delta_timestamps=WINDOW)
    kw = {k: v for k, v in KW.items() if k != "delta_timestamps"}  # the dataset has them
    want = [next(make_loader(ds, options=PipelineOptions(num_workers=0), **kw))]
    options = PipelineOptions(num_workers=1, read_threads=1, worker_buffer_size=1, prefetch=1)
    loader = make_loader(ds, options=options, **kw)
    assert_batches_equal([next(loader)], want)
    loader.close()
    name = ds._episodes.columns.shared_name
    path = os.path.join("/dev/shm", name)
    with open(path, "r+b") as f:
        f.write(b"\x7f" * 64)  # lengths and shards of the first episodes, as laid out
    lengths = ds.episode_lengths.copy()
    for _ in range(2):  # a new loader, twice: each one reads
        loader = make_loader(ds, options=options, **kw)
        assert_batches_equal([next(loader)], want)
        loader.close()
    assert ds._episodes.columns.shared_name != name and not os.path.exists(path)
    assert np.array_equal(ds.episode_lengths, lengths)
