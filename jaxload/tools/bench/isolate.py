"""Running a measurement in a fresh process, so that each starts from the same clean state.

Example:
    >>> result, served = in_fresh_process(measure_jaxload, "out/ds", num_workers=2)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxload.workers.processes import ensure_absl_flags_parsed


def in_fresh_process(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Runs `fn(*args, **kwargs)` in a new spawned Python process and returns its result.

    Each measurement then starts from the same clean state (no modules, caches or memory
    left by the previous one), which keeps peak RSS and time to first batch comparable.
    `fn` must be importable (a module-level function); the process may start its own.
    """
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child_main, args=(child, fn, args, kwargs), daemon=False)
    process.start()
    child.close()
    try:
        ok, value = parent.recv()
    except EOFError:
        process.join()
        ok, value = False, f"the measurement process died (exit code {process.exitcode})"
    process.join()
    if not ok:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)} failed in its process:\n{value}")
    return value


def _child_main(conn: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    import traceback

    ensure_absl_flags_parsed()
    try:
        result = (True, fn(*args, **kwargs))
    except BaseException:
        result = (False, traceback.format_exc())
    conn.send(result)
    conn.close()
