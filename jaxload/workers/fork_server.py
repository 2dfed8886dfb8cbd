"""Worker processes forked from a preloaded server, not spawned (the one place that
changes how Grain starts them).

Grain 0.2.18 starts every worker with `multiprocessing.get_context("spawn")`, written into
`ProcessPrefetchDatasetIterator` (grain/_src/python/dataset/transformations/
process_prefetch.py), with no option and no regard for `multiprocessing.set_start_method`
(tests/workers/test_fork_server.py shows it). A spawned worker is a new interpreter that
imports jax, torch, torchcodec and grain again: ~4.4 s of CPU and ~440 MB per worker on a
2-core VM, paid again by every worker restarted after a crash, so 4 workers there gave a
first batch after 7-14 s.

multiprocessing's "forkserver" start keeps what spawn guarantees: the server is a fresh,
single-threaded interpreter started from the training process's executable, so a worker
inherits no thread, lock, CUDA context, open file or JAX state of the trainer (fork after
CUDA init is unsafe; this never forks the trainer). The server imports the workers'
modules once (`preload_modules`) and forks each worker from itself: a worker starts in a
fraction of a second and shares the imported pages with the server and its siblings.

Trade-offs, documented in docs/LOADER.md ("How workers start"):
- the server lives as long as the training process (one idle process, its pages shared
  with the workers); it exits when the trainer does;
- it is started once per training process, with the environment of that moment: an
  environment variable set later reaches no worker (spawn copied it at each start);
- modules the training script imports at top level beyond `preload_modules` are imported
  by each worker (the script runs again as `__mp_main__`, as with spawn; CPython 3.11's
  forkserver does not preload `__main__`): JAXLOAD_WORKER_PRELOAD="flax,optax" imports
  such modules once, in the server;
- the preload list is process-wide (`multiprocessing.set_forkserver_preload`);
- JAXLOAD_WORKER_START=spawn keeps Grain's spawned workers.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import sys
import threading

from jaxload.workers import server_sys_path

log = logging.getLogger(__name__)

# What every worker imports to unpickle and run the pipeline's worker side; first the
# trainer's sys.path, which the server is not given otherwise (server_sys_path.py).
WORKER_MODULES = (
    "jaxload.workers.server_sys_path",
    "numpy",
    "grain",
    "jaxload.stages.read_batch",
    "jaxload.stages.shared_memory_output",
    "jaxload.workers.processes",
)
# Libraries a JAX training script imports at top level, which each worker would import
# again when the script runs there as __mp_main__: preloaded when the trainer has them.
TRAINER_MODULES = ("jax", "torch", "flax", "optax", "orbax.checkpoint")
# The video decoder's library, imported without `torch._dynamo` (jaxload.workers.
# decoder_preload): preloaded when the workers decode video or the trainer has torchcodec.
DECODER_PRELOAD = "jaxload.workers.decoder_preload"

START_ENV = "JAXLOAD_WORKER_START"
PRELOAD_ENV = "JAXLOAD_WORKER_PRELOAD"

_lock = threading.Lock()
_installed = False


class _ForkServerContextLookup:
    """Stands in for the `multiprocessing` module inside Grain's process_prefetch: its
    one context lookup, `get_context("spawn")`, gets the fork server's context; anything
    else is multiprocessing's own."""

    def get_context(self, method: str | None = None) -> multiprocessing.context.BaseContext:
        # JAXLOAD_WORKER_START is read at each worker start, also after the lookup was set.
        forked = method == "spawn" and enabled()
        return multiprocessing.get_context("forkserver" if forked else method)

    def __getattr__(self, name: str):
        return getattr(multiprocessing, name)


def enabled() -> bool:
    """Whether workers start from the fork server (JAXLOAD_WORKER_START=spawn: they don't;
    nor where the platform has no forkserver start method)."""
    method = os.environ.get(START_ENV, "").strip().lower() or "forkserver"  # empty: unset
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"{START_ENV}={method!r}: use 'forkserver' (default) or 'spawn'")
    return method == "forkserver" and "forkserver" in multiprocessing.get_all_start_methods()


def preload_modules(decodes_video: bool) -> list[str]:
    """The modules the server imports once before it forks any worker.

    Args:
        decodes_video: the workers decode video (torchcodec is preloaded).

    Example:
        preload_modules(decodes_video=True)  # ['numpy', 'grain', ..., 'jax', '...decoder_preload']
    """
    names = list(WORKER_MODULES)
    names += [m for m in TRAINER_MODULES if m in sys.modules]
    names += [DECODER_PRELOAD] if decodes_video or "torchcodec" in sys.modules else []
    extra = [m.strip() for m in os.environ.get(PRELOAD_ENV, "").split(",") if m.strip()]
    for name in extra:
        if not _findable(name):  # the server would skip it silently
            raise ValueError(
                f"{PRELOAD_ENV}: no module {name!r} on this process's sys.path (the fork "
                "server imports what the training process can)"
            )
    return list(dict.fromkeys(names + extra))


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or not a module name
        return False


def start_fork_server(decodes_video: bool) -> bool:
    """Makes Grain's worker processes start from a preloaded fork server, and starts the
    server now (its imports run while the caller goes on). Idempotent; returns whether
    workers start from the server.

    Args:
        decodes_video: the workers decode video (the server preloads torchcodec).

    Example:
        start_fork_server(decodes_video=True)  # make_loader calls it for loaders with workers
    """
    global _installed
    if not enabled():
        return False
    with _lock:
        if not _installed:
            if not _point_grain_at_fork_server():
                return False
            multiprocessing.forkserver.set_forkserver_preload(preload_modules(decodes_video))
            _installed = True
        # The server starts with this environment: the trainer's sys.path at that moment.
        os.environ[server_sys_path.SYS_PATH_ENV] = json.dumps(sys.path)
        # Starts the server unless it runs (again after it died); returns at once: the
        # server imports its preload while the trainer goes on, and the first worker
        # start waits for it.
        multiprocessing.forkserver.ensure_running()
    return True


def _point_grain_at_fork_server() -> bool:
    """Points Grain's worker context lookup at the fork server (Grain offers no option)."""
    from grain._src.python.dataset.transformations import process_prefetch

    lookup = getattr(process_prefetch, "mp", None)
    if isinstance(lookup, _ForkServerContextLookup):
        return True
    if lookup is not multiprocessing:
        # Another Grain: its workers start as it decides (spawn, or an option of its own).
        log.warning(
            "grain %s: its worker start is not the one jaxload knows; workers are spawned",
            getattr(sys.modules.get("grain"), "__version__", "?"),
        )
        return False
    process_prefetch.mp = _ForkServerContextLookup()
    return True


def worker_start_method() -> str:
    """How Grain's next worker process starts: "forkserver" or "spawn"."""
    from grain._src.python.dataset.transformations import process_prefetch

    return process_prefetch.mp.get_context("spawn").get_start_method()
