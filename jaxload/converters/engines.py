"""Where units run: in this process, a local process pool, or Ray tasks.

Every engine runs the same `converters.units.convert_unit` on the units it is given, in
the order given (costliest first, see converters/plan.py), and hands each finished
`UnitResult` to `on_result` in this process, which records it. Engines never write the
job's state themselves, and the output does not depend on which engine ran.

- `inline`: one worker, this process (`--workers 1`).
- `local`: a "spawn" process pool (torch and FFmpeg do not survive fork). Workers die
  with the main process (PR_SET_PDEATHSIG), so a killed converter leaves no orphans
  writing into a directory a rerun is using.
- `ray`: one Ray task per unit, `ray.init()` locally or on a cluster
  (`address="auto"` or RAY_ADDRESS); see docs/CONVERT.md.

After a unit fails, no new unit starts; units already running finish and are recorded
(their work is kept for the rerun), then the first error is raised.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from jaxload.converters.plan import Unit
from jaxload.converters.units import UnitContext, UnitResult, convert_unit
from jaxload.errors import JaxloadError

OnResult = Callable[[UnitResult], None]


class Engine:
    """Runs units; `slots` is how many run at once."""

    name = "engine"
    slots = 1

    def run(self, context: UnitContext, units: Sequence[Unit], on_result: OnResult) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Releases what the engine started."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class InlineEngine(Engine):
    """Units one after another in this process."""

    name = "inline"

    def run(self, context: UnitContext, units: Sequence[Unit], on_result: OnResult) -> None:
        for unit in units:
            on_result(convert_unit(context, unit))


class LocalPoolEngine(Engine):
    """A pool of `workers` spawned processes on this machine."""

    name = "local"

    def __init__(self, workers: int):
        self.slots = workers

    def run(self, context: UnitContext, units: Sequence[Unit], on_result: OnResult) -> None:
        pool = ProcessPoolExecutor(
            max(1, min(self.slots, len(units))),
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_pool_worker,
            initargs=(context, os.getpid()),
        )
        futures = {pool.submit(_run_in_pool, unit): unit for unit in units}
        error: BaseException | None = None
        try:
            for future in as_completed(futures):
                try:
                    result = future.result()
                except CancelledError:
                    continue
                except BrokenProcessPool as e:
                    error = error or JaxloadError(
                        f"a conversion worker died while converting {futures[future].describe()} "
                        "(killed by the system, out of memory?); rerun to resume, perhaps with "
                        "fewer --workers"
                    )
                    error.__cause__ = e
                    break
                except Exception as e:
                    if error is None:
                        error = e
                        for other in futures:
                            other.cancel()  # running units finish; queued ones never start
                    continue
                on_result(result)
        except BaseException:
            _terminate(pool)
            raise
        pool.shutdown(wait=True, cancel_futures=True)
        if error is not None:
            raise error


_CONTEXT: UnitContext | None = None


def _init_pool_worker(context: UnitContext, parent: int) -> None:
    global _CONTEXT
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    die_with_parent(parent)
    _CONTEXT = context


def _run_in_pool(unit: Unit) -> UnitResult:
    return convert_unit(_CONTEXT, unit)


def die_with_parent(parent: int) -> None:
    """Asks Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stops a pool now: queued units are dropped, running ones killed (their units are
    redone by a rerun; finished ones are kept)."""
    # Taken first: shutdown() sets `_processes` to None (the AttributeError that used to
    # hide a Ctrl-C).
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=5)  # reaped: no zombies while the interrupt unwinds


class RayEngine(Engine):
    """One Ray task per unit on a local Ray instance or a cluster.

    Without `address`, `ray.init()` starts Ray on this machine with `workers` CPUs (or
    joins the cluster RAY_ADDRESS names); with `address="auto"` it joins the cluster this
    machine belongs to. A Ray session that is already initialised is used as it is and
    left running.
    """

    name = "ray"

    def __init__(self, workers: int | None, address: str | None = None):
        try:
            import ray
        except ImportError as e:
            raise JaxloadError(
                "--engine ray needs Ray: pip install 'jaxload[convert]' (or pip install ray)"
            ) from e
        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            options = {"include_dashboard": False, "logging_level": "warning"}
            if address or os.environ.get("RAY_ADDRESS"):
                ray.init(address=address, **options)
            else:
                ray.init(num_cpus=workers, **options)
        self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def run(self, context: UnitContext, units: Sequence[Unit], on_result: OnResult) -> None:
        ray = self._ray
        task = ray.remote(num_cpus=1, max_retries=3)(_run_ray_task)
        box = (context.job, context.tmp_dir, ray.put(context))  # Ray resolves no ref in a tuple
        queue = list(units)
        running: dict = {}
        error: BaseException | None = None
        try:
            while queue or running:
                while queue and error is None and len(running) < 2 * self.slots:
                    unit = queue.pop(0)
                    running[task.remote(box, unit)] = unit
                if not running:
                    break
                ready, _ = ray.wait(list(running), num_returns=1)
                unit = running.pop(ready[0])
                try:
                    result = ray.get(ready[0])
                except Exception as e:
                    error = error or _unwrap_ray_error(e, unit)
                    continue
                on_result(result)
        except BaseException:
            for ref in running:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
        if error is not None:
            raise error

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()


_RAY_CONTEXTS: dict[str, UnitContext] = {}


def _run_ray_task(box, unit: Unit) -> UnitResult:
    """A Ray task: runs the unit where the job's partial directory may or may not be."""
    import ray

    job, tmp_dir, ref = box
    shared = os.path.isdir(tmp_dir)  # this node sees the job's directory (or a shared FS)
    context = _RAY_CONTEXTS.get(job)
    if context is None:  # one copy of the job's context per worker process
        context = elsewhere(ray.get(ref), shared=shared)
        _RAY_CONTEXTS[job] = context
    return run_unit_anywhere(context, unit, shared=shared)


def elsewhere(context: UnitContext, *, shared: bool) -> UnitContext:
    """The context for a machine that does not see the job's cache: downloads go to a
    per-job cache in this machine's temp directory."""
    files = context.source.files
    if files.remote and not shared:
        cache = Path(tempfile.gettempdir()) / "jaxload-cache" / context.job[:16]
        context.source.files = files.with_cache_dir(cache)
    return context


def run_unit_anywhere(context: UnitContext, unit: Unit, *, shared: bool) -> UnitResult:
    """convert_unit, with the part written in place when this machine sees the job's
    directory (`shared`), or written to scratch space and returned as bytes otherwise."""
    if shared:
        return convert_unit(context, unit)
    scratch = tempfile.mkdtemp(prefix="jaxload-unit-")
    try:
        result = convert_unit(context, unit, scratch)
        data = Path(result.part_path).read_bytes()
        return dataclasses.replace(result, part_path=None, part_bytes=data)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _unwrap_ray_error(error: BaseException, unit: Unit) -> BaseException:
    """The task's own JaxloadError (clean message), or a JaxloadError naming the unit."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, JaxloadError):
        return cause
    wrapped = JaxloadError(
        f"Ray task for {unit.describe()} failed: {type(error).__name__}: {error}"
    )
    wrapped.__cause__ = error
    return wrapped


def make_engine(kind: str, workers: int | None, *, ray_address: str | None = None) -> Engine:
    """The engine for --engine/--workers (workers=None: every core)."""
    if kind == "ray":
        return RayEngine(workers, ray_address)
    if kind != "local":
        raise JaxloadError(f"--engine {kind!r}: choose local or ray")
    if ray_address:
        raise JaxloadError("--ray-address needs --engine ray")
    count = workers or os.cpu_count() or 1
    return InlineEngine() if count == 1 else LocalPoolEngine(count)
