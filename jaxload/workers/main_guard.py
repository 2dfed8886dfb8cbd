"""Scripts that start worker processes without `if __name__ == "__main__":`, explained.

A worker process (forked from jaxload's fork server, or spawned: jaxload.workers.fork_server)
first runs the top level of the training script again (as module `__mp_main__`). A script that builds and
iterates a loader at its top level would then start workers from every worker;
multiprocessing refuses ("An attempt has been made to start a new process before the
current process has finished its bootstrapping phase"), the worker exits with status 1,
the script's output appears twice, and Grain says only "Worker process was terminated
unexpectedly with exit code 1". Two checks turn that into `UnguardedScriptError`:

* `check_before_start`, in the training process before any worker starts: the line of the
  script's top level now running is the call that starts them. Outside every `if` (and
  `while`/`match`) statement it runs unconditionally, so each worker would run it again:
  the error is raised at once, and no worker starts. (A call under some `if` may be
  guarded by other means, such as `multiprocessing.current_process().name`, so it is left
  to the second check.)
* `exit_if_bootstrapping`, in a worker that ran the script's top level and reached a
  loader's start there anyway: it prints why, leaves a marker named by its parent's pid
  (`unguarded_marker`) and exits with UNGUARDED_EXIT_CODE; `explain_worker_crash` finds
  the marker in the training process when the pipeline fails.

Usage (what `Loader.start` does)::

    main_guard.check_before_start(num_workers)
    ...
    except Exception:  # from next() on Grain's iterator
        error = main_guard.explain_worker_crash()
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import multiprocessing
import os
import sys
import tempfile
from types import FrameType, ModuleType

from jaxload.errors import UnguardedScriptError
from jaxload.workers.processes import training_process_pid

# Exit status of a worker that stopped in a re-run of an unguarded script (sysexits'
# EX_CONFIG); no other code of a Grain worker exits with it.
UNGUARDED_EXIT_CODE = 78
DOCS = 'docs/LOADER.md, "Worker processes and the `__main__` guard"'
_WHY = (
    "Worker processes start by running the script's top level again (as multiprocessing's "
    '"forkserver" and "spawn" do), so each worker would build the loader and start workers of its own; '
    "multiprocessing refuses that, the worker dies, and the script's output appears once "
    "more per worker."
)
_FIX = (
    'Put the script\'s top-level code under `if __name__ == "__main__":` (or in a main() '
    "called there), or pass options=jaxload.PipelineOptions(num_workers=0) to read in this "
    "process; see " + DOCS + "."
)


def check_before_start(num_workers: int) -> None:
    """Raise UnguardedScriptError if starting `num_workers` workers now runs into an
    unguarded script; in a worker re-running the script, exit (`exit_if_bootstrapping`)."""
    exit_if_bootstrapping()
    with contextlib.suppress(OSError):  # a marker of an earlier process of this pid
        os.unlink(unguarded_marker(os.getpid()))
    where = unguarded_call_site()
    if where is not None:
        path, line = where
        raise UnguardedScriptError(
            f"{path}, line {line}, starts {num_workers} loader worker process"
            f"{'es' if num_workers != 1 else ''} from the script's top level, outside "
            f'`if __name__ == "__main__":`. {_WHY} {_FIX}'
        )


def exit_if_bootstrapping() -> None:
    """In a process that is still running the script's top level as part of its own start
    (a spawned worker re-running an unguarded script): say why on stderr and exit."""
    if not bootstrapping():
        return
    # The script being run again is module __mp_main__ meanwhile (multiprocessing.spawn).
    script = getattr(sys.modules.get("__mp_main__"), "__file__", None) or "the training script"
    print(
        f"jaxload: worker process {os.getpid()} ran the top level of {script} again and "
        f'reached a loader\'s start there: the script needs `if __name__ == "__main__":` '
        f"({DOCS}). Exiting with status {UNGUARDED_EXIT_CODE}.",
        file=sys.stderr,
        flush=True,
    )
    with contextlib.suppress(OSError), open(unguarded_marker(training_process_pid()), "w") as f:
        f.write(str(script))
    raise SystemExit(UNGUARDED_EXIT_CODE)


def bootstrapping() -> bool:
    """Whether this process is a worker still running the script's top level as part of
    its start (multiprocessing's `_inheriting`, set while it prepares)."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def unguarded_marker(parent_pid: int) -> str:
    """The file a worker of training process `parent_pid` leaves when it exits from
    `exit_if_bootstrapping` (the worker never reaches Grain's worker_init_fn)."""
    return os.path.join(tempfile.gettempdir(), f"jaxload-unguarded-{parent_pid}")


def explain_worker_crash() -> UnguardedScriptError | None:
    """The UnguardedScriptError behind a failed pipeline, if one of this process's workers
    exited from `exit_if_bootstrapping` (its marker is taken); None otherwise."""
    try:
        os.unlink(unguarded_marker(os.getpid()))
    except OSError:
        return None
    script = _rerun_script(sys.modules.get("__main__")) or "the training script"
    return UnguardedScriptError(
        f"a loader worker process ran the top level of {script} again and reached a "
        f'loader\'s start there: the script starts its loader outside `if __name__ == "__main__":`. '
        f"{_WHY} {_FIX}"
    )


def unguarded_call_site() -> tuple[str, int] | None:
    """(script, line) when the running line of the script's top level would run again in
    every spawned worker: the script is one spawn re-runs and the line is under no `if`,
    `while` or `match`. None when that is not certain."""
    main = sys.modules.get("__main__")
    script = _rerun_script(main)
    frame = _top_level_frame(main)
    if script is None or frame is None:
        return None
    source = "".join(linecache.getlines(frame.f_code.co_filename, frame.f_globals))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    return (script, line) if _unconditional(tree.body, line) else None


def _rerun_script(main: ModuleType | None) -> str | None:
    """The file a spawned process runs again before it starts (multiprocessing.spawn's
    rules), or None: `python -c`, a REPL, a package's __main__.py run nothing again."""
    if main is None:
        return None
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        if name == "__main__" or name.endswith(".__main__"):
            return None
        return getattr(main, "__file__", None) or name
    path = getattr(main, "__file__", None)
    if path is None or os.path.splitext(os.path.basename(path))[0] == "ipython":
        return None
    return path


def _top_level_frame(main: ModuleType | None) -> FrameType | None:
    """This thread's frame running the main module's top level (None: it has finished, or
    runs in another thread)."""
    if main is None:
        return None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            return frame
        frame = frame.f_back
    return None


_BLOCKS = ("body", "orelse", "finalbody", "handlers")


def _unconditional(body: list[ast.stmt], line: int) -> bool:
    """Whether `line` lies in a statement of `body` that runs with no condition around it:
    an `if`, `match`, `while` (but `while True`), `x if c else y` or `c and f()` is a
    possible guard."""
    for statement in body:
        if not _spans(statement, line):
            continue
        if isinstance(statement, (ast.If, ast.Match)):
            return False
        if isinstance(statement, ast.While) and not _always_true(statement.test):
            return False
        nested = [s for block in _BLOCKS for s in getattr(statement, block, None) or []]
        for handler in [n for n in nested if isinstance(n, ast.ExceptHandler)]:
            nested.extend(handler.body)
        inner = [s for s in nested if isinstance(s, ast.stmt)]
        if any(_spans(s, line) for s in inner):
            return _unconditional(inner, line)
        # A simple statement, or a compound one's header (`for batch in loader:`).
        header = [v for f, v in ast.iter_fields(statement) if f not in _BLOCKS]
        nodes = [
            n
            for v in header
            for item in (v if isinstance(v, list) else [v])
            if isinstance(item, ast.AST)
            for n in ast.walk(item)
        ]
        return not any(isinstance(n, (ast.IfExp, ast.BoolOp)) for n in nodes)
    return False


def _spans(node: ast.AST, line: int) -> bool:
    return node.lineno <= line <= (node.end_lineno or node.lineno)


def _always_true(test: ast.expr) -> bool:
    return isinstance(test, ast.Constant) and bool(test.value)
