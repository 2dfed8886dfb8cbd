"""Grain worker processes: known by pid (`WorkerRegistry`, through Grain's public
`worker_init_fn`), with absl flags parsed, gone with their parent, and what crashed ones
left in /dev/shm reclaimed.

Worker processes import the training script's `__main__` module: a script that builds a
loader at top level must guard it with `if __name__ == "__main__":`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import re
import signal
import stat
import threading
import time

from jaxload.storage.scratch import owned_directory, process_alive, remove_owned
from jaxload.workers import shared_batch

log = logging.getLogger(__name__)

# How often a worker checks that the training process is still alive and still wants it.
PARENT_POLL_S = 0.2
# How often the training process looks for workers that ended (well within the second
# after which Grain collects a dead worker's exit status: the signal is read before).
WATCH_INTERVAL_S = 0.05
# Slots: `jaxload_<training process pid>_<random hex>` (jaxload.workers.shared_batch).
_SEGMENT = re.compile(r"jaxload_(\d+)_[0-9a-f]+")
# multiprocessing's named semaphores (Grain's queues and events), /dev/shm/sem.mp-*.
_SEMAPHORE = re.compile(r"sem\.mp-[0-9a-z_]+")
# Semaphores younger than this are left alone (a margin: a live one is always mapped).
_SEMAPHORE_MIN_AGE_S = 2.0
# Inode numbers of the initial (host) pid and IPC namespaces (linux/proc_ns.h).
_HOST_PID_NS, _HOST_IPC_NS = 0xEFFFFFFC, 0xEFFFFFFF


# Set in a worker process once the training process closed its pipeline: the batches its
# read threads still have queued are not wanted, and each would otherwise be read and
# decoded before the worker can exit (Grain stops workers one after another, each after
# its queued work: minutes for a loader with 14 workers on a GPU host).
_pipeline_closed = threading.Event()


class PipelineClosed(Exception):
    """Raised by a worker's reads once its pipeline was closed (nobody receives it)."""


def raise_if_pipeline_closed() -> None:
    """In a worker process: raises PipelineClosed once the training process closed the
    pipeline (ReadBatch calls it before each batch)."""
    if _pipeline_closed.is_set():
        raise PipelineClosed("the loader was closed")


@dataclasses.dataclass(frozen=True)
class WorkerExit:
    """How a worker process ended: `signal` (SIGKILL: the OOM killer's) or exit `status`;
    both None when its status was collected elsewhere first."""

    index: int | None  # None: a worker that died before it said who it is
    pid: int | None
    signal: int | None = None
    status: int | None = None

    def describe(self) -> str:
        if self.signal is not None:
            name = _signal_name(self.signal)
            oom = ", e.g. by the OOM killer" if self.signal == signal.SIGKILL else ""
            return f"was killed by signal {self.signal} ({name}{oom})"
        if self.status is not None:
            return f"exited with status {self.status}"
        return "ended"


class WorkerHooks:
    """Grain's `worker_init_fn` (its public hook, run first in each worker process): the
    worker records its pid under `directory` as `<index>` and exits when the training
    process dies or closes the pipeline (`exit_with_parent`). Picklable: Grain sends it to
    each worker."""

    def __init__(self, directory: str):
        self.directory = directory

    def __call__(self, worker_index: int, worker_count: int) -> None:
        path = os.path.join(self.directory, str(int(worker_index)))
        with contextlib.suppress(OSError):  # the pipeline closed meanwhile: nobody asks
            with open(path + ".new", "w") as f:
                f.write(str(os.getpid()))
            os.replace(path + ".new", path)
        exit_with_parent(worker_index, worker_count, self.directory)


class WorkerRegistry:
    """Which process is worker i of one pipeline, and how the ones that ended did.

    The workers say who they are through `hooks()` (Grain's worker_init_fn); a daemon
    thread of this process watches them and keeps each one's end (signal or exit status)
    the moment it comes, with `waitid(..., WNOWAIT)`, which leaves the process for
    multiprocessing to reap as before. No Grain internals are read.

        registry = WorkerRegistry()
        ds.mp_prefetch(options, worker_init_fn=registry.hooks())
        registry.pid(1), registry.ended()
        registry.close()
    """

    def __init__(self) -> None:
        self.directory = owned_directory("jaxload-workers")
        self._pids: dict[int, int] = {}
        self._ended: dict[int, WorkerExit] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._run, daemon=True, name="jaxload-workers")
        self._watch.start()

    def hooks(self) -> WorkerHooks:
        return WorkerHooks(self.directory)

    def pid(self, index: int) -> int | None:
        """The pid of worker `index` (None until it has started)."""
        self._poll()
        with self._lock:
            return self._pids.get(index)

    def ended(self) -> list[WorkerExit]:
        """The workers that ended, in worker order (a worker that exits normally ends too:
        ask after a failure, while the pipeline should still run)."""
        self._poll()
        with self._lock:
            return [self._ended[i] for i in sorted(self._ended)]

    def close(self) -> None:
        """Stops watching; the workers exit within PARENT_POLL_S, all at once (close this
        before Grain's iterator, which joins its workers one after another)."""
        self._stop.set()
        remove_owned(self.directory)

    def _run(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            self._poll()

    def _poll(self) -> None:
        with self._lock:
            with contextlib.suppress(OSError):
                for name in os.listdir(self.directory):
                    if name.isdigit() and int(name) not in self._pids:
                        path = os.path.join(self.directory, name)
                        with contextlib.suppress(OSError, ValueError), open(path) as f:
                            self._pids[int(name)] = int(f.read())
            for index, pid in self._pids.items():
                if index not in self._ended:
                    end = _ended(index, pid)
                    if end is not None:
                        self._ended[index] = end


# Grain's error for a worker that ended under it (grain==0.2.18,
# process_prefetch.ProcessPrefetchDatasetIterator): the exit code as multiprocessing gives
# it, minus the signal number for a signal.
_GRAIN_DEATH = re.compile(r"Worker process was terminated unexpectedly with exit code (-?\d+)")


def death(registry: WorkerRegistry, error: BaseException) -> WorkerExit | None:
    """The worker whose death failed the pipeline with `error`, or None when none died.

    A worker that ended by a signal or with a status other than 0 died. One that ended
    otherwise either forwarded an error of its own first (and is not a death: that error is
    the cause) or was collected by someone else before the registry saw how it ended
    (`multiprocessing.active_children()`, `Process.exitcode`, Grain itself): then Grain's
    own error for it says the exit code. A worker killed while it started, before its
    `worker_init_fn` ran, is not known by index or pid at all: Grain's error says it died."""
    ended = registry.ended()
    dead = [w for w in ended if w.signal is not None or w.status]
    if dead:
        return dead[0]
    unknown = [w for w in ended if w.signal is None and w.status is None]
    match = _GRAIN_DEATH.search(str(error)) if type(error) is RuntimeError else None
    if match is None:
        return None
    code = int(match.group(1))
    end = unknown[0] if unknown else WorkerExit(None, None)
    if code < 0:
        return dataclasses.replace(end, signal=-code)
    return dataclasses.replace(end, status=code)


def _ended(index: int, pid: int) -> WorkerExit | None:
    """How child `pid` ended, if it has (left unreaped), else None."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already (by multiprocessing), or not our child
        return None if process_alive(pid) else WorkerExit(index, pid)
    if info is None:
        return None  # running
    if info.si_code == os.CLD_EXITED:
        return WorkerExit(index, pid, status=info.si_status)
    return WorkerExit(index, pid, signal=info.si_status)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def ensure_absl_flags_parsed() -> None:
    """Grain's worker processes read absl flags; a plain script never parses them."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


# -- workers die with the training process ---------------------------------------------------


def exit_with_parent(worker_index: int, worker_count: int, directory: str | None = None) -> None:
    """Grain's worker_init_fn: this worker exits when the training process dies, or when
    the pipeline's `directory` (its WorkerRegistry's) is gone: the pipeline was closed.

    Otherwise a SIGKILLed trainer leaves its workers (and through them the resource tracker,
    with every segment and semaphore it would clean up) alive for good. A thread watches the
    parent pid rather than PR_SET_PDEATHSIG: that signal fires when the *thread* that
    started the worker exits, and Grain starts workers from pool threads.

    When the pipeline is closed the worker stops reading (`raise_if_pipeline_closed`), so
    that Grain, which stops workers one after another, finds each one idle. (It is not
    killed: a worker that dies while its queue's feeder thread writes leaves a partial
    message that blocks Grain's close for good.)
    """
    # The training process started this worker directly (spawn) or through the fork server
    # it started (jaxload.workers.fork_server). Its end is seen on multiprocessing's parent
    # sentinel (a pipe the trainer holds), not by the parent pid changing: a fork server
    # outlives the trainer while its workers hold the server's "alive" pipe.
    trainer = multiprocessing.parent_process()
    parent_pid = trainer.pid if trainer is not None else os.getppid()
    watch = threading.Thread(
        target=_exit_when_orphaned,
        args=(parent_pid, directory, trainer),
        daemon=True,
        name="jaxload-parent",
    )
    watch.start()


def _orphaned(
    parent_pid: int,
    directory: str | None,
    trainer: multiprocessing.process.BaseProcess | None = None,
) -> bool:
    """One look of a worker's watch: marks the pipeline closed once its `directory` is gone
    (reads stop; the watch goes on: a dead trainer's directory may be swept too, and its
    slots must still be unlinked), and says whether the training process died (`trainer`,
    multiprocessing's parent process, when known; else the parent pid changed)."""
    if directory is not None and not _pipeline_closed.is_set() and not os.path.isdir(directory):
        _pipeline_closed.set()
    if trainer is not None:
        return not trainer.is_alive()
    return os.getppid() != parent_pid


def _exit_when_orphaned(
    parent_pid: int,
    directory: str | None = None,
    trainer: multiprocessing.process.BaseProcess | None = None,
) -> None:
    while not _orphaned(parent_pid, directory, trainer):
        time.sleep(PARENT_POLL_S)
    # Nobody can open the slots now; the resource tracker may be dead too. What the dead
    # trainer itself made under its name (its metadata columns, jaxload.format.columns) goes
    # too: it can no longer unlink them.
    with contextlib.suppress(OSError):
        prefix = shared_batch.segment_prefix(parent_pid)
        for name in os.listdir(shared_batch.SHM_DIR):
            if name.startswith(prefix):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(shared_batch.SHM_DIR, name))
    with contextlib.suppress(Exception):
        shared_batch.worker_pool().exit_process(1)
    os._exit(1)


# -- reclaiming what crashed loaders left in /dev/shm ----------------------------------------


def reclaim_shared_memory(shm_dir: str = shared_batch.SHM_DIR) -> list[str]:
    """Removes what dead loaders left in `shm_dir`; returns the names removed.

    A training process killed together with its workers and resource tracker (SIGKILL of
    the process group, a job scheduler's kill) leaves its unsent slots
    (`jaxload_<pid>_*`) and multiprocessing's semaphores (`sem.mp-*`) behind: nothing else
    ever removes them. Removed here: slots of this user whose training pid is gone, and
    semaphores of this user older than a moment; either only when no process has it mapped
    (a live one always is). Liveness needs every user of `shm_dir` in this pid namespace:
    slots are reclaimed unless /dev/shm is the host's seen from a container's pid namespace,
    semaphores (not jaxload's by name) only in the host's pid namespace.
    JAXLOAD_RECLAIM_SHM=0 turns this off, =1 on everywhere.
    """
    slots_ok, semaphores_ok = _reclaim_allowed()
    if not (slots_ok or semaphores_ok):
        return []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    now = time.time()
    candidates = [
        name
        for name in names
        if (slots_ok and _dead_slot(name)) or (semaphores_ok and _old_semaphore(shm_dir, name, now))
    ]
    inodes = {n: _owned_inode(os.path.join(shm_dir, n)) for n in candidates}
    candidates = [n for n in candidates if inodes[n] is not None]
    if not candidates:
        return []
    mapped = _mapped_inodes(shm_dir)
    if mapped is None:
        return []
    removed = []
    for name in candidates:
        if inodes[name] in mapped:
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
        except OSError as e:  # gone meanwhile, replaced by a directory, not ours to remove
            log.debug("%s: not reclaimed (%s)", os.path.join(shm_dir, name), e)
            continue
        removed.append(name)
    if removed:
        log.info("removed %d leftovers of dead loaders from %s", len(removed), shm_dir)
    return removed


def _reclaim_allowed() -> tuple[bool, bool]:
    """(slots, semaphores): whether this process can tell which of them are dead."""
    forced = os.environ.get("JAXLOAD_RECLAIM_SHM")
    if forced in ("0", "1"):
        return forced == "1", forced == "1"
    try:
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
        ipc_ns = os.stat("/proc/self/ns/ipc").st_ino
    except OSError:  # not Linux, or no /proc: liveness is unknowable
        return False, False
    host_view = pid_ns == _HOST_PID_NS
    # A container's own pid namespace over the host's /dev/shm (--ipc=host): pids of other
    # containers' loaders look dead from here.
    return host_view or ipc_ns != _HOST_IPC_NS, host_view


def _dead_slot(name: str) -> bool:
    match = _SEGMENT.fullmatch(name)
    return match is not None and not process_alive(int(match.group(1)))


def _old_semaphore(shm_dir: str, name: str, now: float) -> bool:
    if not _SEMAPHORE.fullmatch(name):
        return False
    try:
        return now - os.stat(os.path.join(shm_dir, name)).st_mtime > _SEMAPHORE_MIN_AGE_S
    except OSError:
        return False


def _owned_inode(path: str) -> int | None:
    """The file's inode if it is a regular file this user owns (not followed if a link):
    anything else of a slot's name (a directory, a link, a fifo, another user's file) is
    no leftover of ours, and is skipped (a directory `jaxload_<dead pid>_x` made every
    loader start on the machine fail with IsADirectoryError)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        log.debug("%s: not a regular file of this user; not reclaimed", path)
        return None
    return st.st_ino


def _mapped_inodes(shm_dir: str) -> set[int] | None:
    """Inodes of files in `shm_dir` that a process we can see has mapped (None: /proc
    unreadable). By inode, not name: glibc maps a semaphore under a temporary name before
    linking it to its own, so /proc/<pid>/maps shows another (deleted) name."""
    try:
        device = os.stat(shm_dir).st_dev
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}"
    inodes = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    fields = line.split(None, 5)
                    if len(fields) > 4 and fields[3] == wanted:
                        inodes.add(int(fields[4]))
        except OSError:  # gone meanwhile, or another user's (who cannot map our 0600 files)
            continue
    return inodes


# -- finding worker processes ----------------------------------------------------------------

# In the command line of multiprocessing's fork server and of the workers it forks.
FORK_SERVER = b"multiprocessing.forkserver"


def worker_pids(trainer_pid: int | None = None) -> list[int]:
    """Live worker processes (Grain's, any multiprocessing start) of `trainer_pid` (default:
    this process), read from /proc without reaping anything: its children multiprocessing
    spawned, and the children of the fork server it started (jaxload.workers.fork_server);
    not the fork server itself nor the resource tracker.

    Args:
        trainer_pid: the training process.

    Example:
        os.kill(worker_pids()[0], signal.SIGKILL)  # what the OOM killer does, in a soak test
    """
    trainer_pid = os.getpid() if trainer_pid is None else trainer_pid
    processes = _processes()
    servers = {
        pid
        for pid, (ppid, _, cmdline) in processes.items()
        if ppid == trainer_pid and FORK_SERVER in cmdline
    }
    found = [
        pid
        for pid, (ppid, state, cmdline) in processes.items()
        if state != b"Z" and ((ppid == trainer_pid and b"spawn_main" in cmdline) or ppid in servers)
    ]
    return sorted(found)


def training_process_pid() -> int:
    """In a worker process: the training process's pid, known before multiprocessing says
    it (while the worker still imports the script): the parent, or the fork server's."""
    parent = os.getppid()
    seen = _process(parent)  # (its parent, state, command line)
    return seen[0] if seen is not None and FORK_SERVER in seen[2] else parent


def _processes() -> dict[int, tuple[int, bytes, bytes]]:
    """pid -> (parent pid, state, command line) of every process in /proc."""
    found = {int(e): _process(int(e)) for e in os.listdir("/proc") if e.isdigit()}
    return {pid: seen for pid, seen in found.items() if seen is not None}


def _process(pid: int) -> tuple[int, bytes, bytes] | None:
    """(parent pid, state, command line) of `pid` from /proc; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return int(fields[1]), fields[0], f.read()
    except (OSError, IndexError, ValueError):
        return None
