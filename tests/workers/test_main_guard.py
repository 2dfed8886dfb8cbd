"""Scripts without `if __name__ == "__main__":` (jaxload.workers.main_guard): explained
before any worker starts when the loader's start is at the top level, by the worker's exit
when it is under some `if`; a guarded script runs its workers. The script tests run real
scripts with real worker processes; the unit tests drive the checks in this process with a
script module of their own as `__main__`."""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
import types
from pathlib import Path

import pytest

from jaxload.converters.convert import convert
from jaxload.errors import UnguardedScriptError
from jaxload.workers import main_guard
from jaxload.workers.main_guard import UNGUARDED_EXIT_CODE, _unconditional
from tests.pipeline.test_first_hour_loader import CAMERA, _run_script
from tests.support.lerobot_factory import write_lerobot_v3


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> tuple[Path]:
    """(a,): a converted dataset with a camera."""
    root = tmp_path_factory.mktemp("main_guard")
    convert(
        write_lerobot_v3(root / "src_a", cameras={CAMERA: (48, 64)}),
        root / "a",
        workers=1,
        progress=False,
    )
    return (root / "a",)


# -- scripts without `if __name__ == "__main__":` -----------------------------------------------

UNGUARDED = """
import sys
import jaxload

print("top level ran", flush=True)
loader = jaxload.make_loader(sys.argv[1], global_batch_size=4, options=jaxload.PipelineOptions(num_workers=2))
for step, batch in zip(range(2), loader):
    pass
print("done")
"""

# Under an `if` that is no __main__ guard: the training process cannot tell before it
# starts the workers, so the workers' exit status says it.
UNGUARDED_UNDER_AN_IF = """
import sys
import jaxload

print("top level ran", flush=True)
if len(sys.argv) > 1:
    loader = jaxload.make_loader(sys.argv[1], global_batch_size=4, options=jaxload.PipelineOptions(num_workers=2))
    for step, batch in zip(range(2), loader):
        pass
print("done")
"""

GUARDED = """
import sys
import jaxload


def main():
    print("main ran", flush=True)
    with jaxload.make_loader(sys.argv[1], global_batch_size=4, options=jaxload.PipelineOptions(num_workers=2)) as loader:
        batches = [next(loader) for _ in range(3)]
        print("batches", len(batches), loader, flush=True)


if __name__ == "__main__":
    main()
"""


@pytest.mark.processes
def test_an_unguarded_script_is_explained_before_any_worker_starts(datasets, tmp_path):
    run = _run_script(tmp_path, UNGUARDED, datasets[0])
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("jaxload.errors.UnguardedScriptError: ")
    assert f"{tmp_path / 'script.py'}, line 7, starts 2 loader worker processes" in last
    assert 'if __name__ == "__main__":' in last and "num_workers=0" in last
    assert 'docs/LOADER.md, "Worker processes and the `__main__` guard"' in last
    assert run.stdout.count("top level ran") == 1 and "done" not in run.stdout  # no worker ran
    assert "terminated unexpectedly" not in run.stderr


@pytest.mark.processes
def test_a_worker_that_re_runs_an_unguarded_script_is_explained(datasets, tmp_path):
    run = _run_script(tmp_path, UNGUARDED_UNDER_AN_IF, datasets[0])
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("jaxload.errors.UnguardedScriptError: a loader worker process ran")
    assert "script.py again" in last and 'if __name__ == "__main__":' in last
    said = f"ran the top level of {tmp_path / 'script.py'} again and reached a loader's start"
    assert said in run.stderr and f"Exiting with status {UNGUARDED_EXIT_CODE}" in run.stderr
    assert "done" not in run.stdout


@pytest.mark.processes
def test_a_guarded_script_runs_its_workers(datasets, tmp_path):
    run = _run_script(tmp_path, GUARDED, datasets[0])
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("main ran") == 1
    assert "batches 3 Loader(" in run.stdout and "workers=2" in run.stdout


SOURCE = """\
import x
loader = make()
for batch in loader:
    if batch:
        print(1)
if __name__ == "__main__":
    for batch in loader:
        pass
while True:
    next(loader)
while running:
    next(loader)
try:
    next(loader)
except E:
    next(loader)
__name__ == "__main__" and main()
"""


@pytest.mark.parametrize(
    ("line", "unconditional"),
    [
        (2, True),  # loader = make()
        (3, True),  # for batch in loader:
        (5, False),  # under `if batch:`
        (7, False),  # under the __main__ guard
        (10, True),  # under `while True:`
        (12, False),  # under `while running:`
        (14, True),  # in a try
        (16, True),  # in its except
        (17, False),  # `__name__ == "__main__" and main()`
    ],
)
def test_which_top_level_lines_every_worker_runs_again(line, unconditional):
    assert _unconditional(ast.parse(SOURCE).body, line) is unconditional


# -- the checks in this process -----------------------------------------------------------------


@pytest.fixture
def markers(tmp_path, monkeypatch) -> Path:
    """Markers go to a folder of the test's own (they are named by a pid otherwise shared
    with every process of the machine that uses the same temporary folder)."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    return tmp_path


def _run_as_main(monkeypatch, path: Path, source: str) -> dict:
    """Run `source`, written to `path`, as the top level of module `__main__` (a script
    `python path` runs): spawn would run it again in every worker."""
    path.write_text(source)
    main = types.ModuleType("__main__")
    main.__file__ = str(path)
    main.__spec__ = None
    main.main_guard = main_guard
    monkeypatch.setitem(sys.modules, "__main__", main)
    exec(compile(source, str(path), "exec"), vars(main))
    return vars(main)


def test_a_top_level_start_in_a_script_is_refused_naming_the_file_and_line(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    source = "import os\nmain_guard.check_before_start(3)\n"
    with pytest.raises(UnguardedScriptError) as raised:
        _run_as_main(monkeypatch, script, source)
    said = str(raised.value)
    assert said.startswith(f"{script}, line 2, starts 3 loader worker processes")
    assert 'if __name__ == "__main__":' in said and "num_workers=0" in said
    assert main_guard.DOCS in said
    one = tmp_path / "one.py"
    with pytest.raises(UnguardedScriptError, match=r"line 1, starts 1 loader worker process from"):
        _run_as_main(monkeypatch, one, "main_guard.check_before_start(1)\n")


def test_a_start_under_an_if_or_in_a_function_is_left_to_the_workers(tmp_path, monkeypatch):
    guarded = "if __name__ == '__main__':\n    site = main_guard.unguarded_call_site()\n"
    assert _run_as_main(monkeypatch, tmp_path / "a.py", guarded)["site"] is None
    in_main = "def main():\n    return main_guard.unguarded_call_site()\nsite = main()\n"
    # main() is called from the top level, unconditionally: the frame found is that line.
    assert _run_as_main(monkeypatch, tmp_path / "b.py", in_main)["site"] == (
        str(tmp_path / "b.py"),
        3,
    )
    bare = "site = main_guard.unguarded_call_site()\n"
    assert _run_as_main(monkeypatch, tmp_path / "c.py", bare)["site"] == (str(tmp_path / "c.py"), 1)


@pytest.mark.parametrize(
    ("spec_name", "file", "reruns"),
    [
        (None, "/x/train.py", "/x/train.py"),  # python train.py
        ("train", "/x/train.py", "/x/train.py"),  # python -m train
        ("pkg.__main__", "/x/pkg/__main__.py", None),  # python -m pkg
        ("__main__", "/x/__main__.py", None),
        (None, None, None),  # python -c, a REPL
        (None, "/x/bin/ipython", None),
    ],
)
def test_which_main_modules_spawn_runs_again(spec_name, file, reruns):
    main = types.ModuleType("__main__")
    main.__spec__ = None if spec_name is None else types.SimpleNamespace(name=spec_name)
    if file is not None:
        main.__file__ = file
    assert main_guard._rerun_script(main) == reruns
    assert main_guard._rerun_script(None) is None


def test_a_worker_re_running_a_script_exits_and_the_trainer_explains_it(
    markers, monkeypatch, capsys
):
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    script = types.ModuleType("__mp_main__")
    script.__file__ = "/x/train.py"
    monkeypatch.setitem(sys.modules, "__mp_main__", script)
    with pytest.raises(SystemExit) as exited:
        main_guard.check_before_start(2)
    assert exited.value.code == UNGUARDED_EXIT_CODE
    err = capsys.readouterr().err
    assert f"worker process {os.getpid()} ran the top level of /x/train.py again" in err
    assert f"Exiting with status {UNGUARDED_EXIT_CODE}" in err
    marker = Path(main_guard.unguarded_marker(os.getppid()))
    assert marker.parent == markers and marker.read_text() == "/x/train.py"


def test_the_trainer_explains_a_crash_only_when_a_worker_left_its_marker(markers, monkeypatch):
    assert main_guard.explain_worker_crash() is None
    marker = Path(main_guard.unguarded_marker(os.getpid()))
    marker.write_text("/x/train.py")
    main = types.ModuleType("__main__")
    main.__file__, main.__spec__ = "/x/train.py", None
    monkeypatch.setitem(sys.modules, "__main__", main)
    error = main_guard.explain_worker_crash()
    assert isinstance(error, UnguardedScriptError)
    assert "ran the top level of /x/train.py again" in str(error)
    assert not marker.exists()  # taken: the next failure is not explained by it
    assert main_guard.explain_worker_crash() is None


def test_a_stale_marker_of_this_pid_is_removed_before_workers_start(markers, monkeypatch):
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # python -c
    marker = Path(main_guard.unguarded_marker(os.getpid()))
    marker.write_text("an earlier process with this pid")
    main_guard.check_before_start(2)
    assert not marker.exists()
