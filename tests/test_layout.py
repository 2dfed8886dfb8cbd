"""The package's shape: one import package (`jaxload`), no import cycles, small modules,
and a trainer's import path free of tooling libraries."""

import ast
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

MAX_LINES = 600
# Libraries a trainer never needs: tooling and the converter bring them.
TOOLING_LIBRARIES = ("matplotlib", "psutil", "ray", "tqdm", "av", "huggingface_hub", "fsspec")


def _modules() -> dict[str, Path]:
    """Installed module name -> source file (one import package: jaxload/)."""
    out = {}
    for path in (REPO_ROOT / "jaxload").rglob("*.py"):
        parts = path.relative_to(REPO_ROOT / "jaxload").with_suffix("").parts
        out[".".join(("jaxload", *parts)).removesuffix(".__init__")] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the project that `name` imports anywhere (function bodies included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            # A module importing its own package's public face is no cycle.
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    modules = _modules()
    graph = {n: _imports(n, p, set(modules)) for n, p in modules.items()}
    assert _cycles(graph) == []


def test_a_detected_cycle_is_reported():
    # The checker itself: a -> b -> a is found, a -> b alone is not.
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_over_the_line_limit():
    long = {n: len(p.read_text().splitlines()) for n, p in _modules().items()}
    assert {n: lines for n, lines in long.items() if lines > MAX_LINES} == {}


# Modules without logic of their own, which need no test file of their name.
NO_LOGIC = {
    "jaxload/commands/eval_parallel.py": "a re-export of jaxload.tools.eval.launcher's main",
    "jaxload/resolution/request.py": "a frozen dataclass of make_loader's arguments",
}


def _test_file_of(module: Path) -> Path:
    """jaxload/<path>/<name>.py -> tests/<path>/test_<name>.py."""
    relative = module.relative_to(REPO_ROOT / "jaxload")
    return REPO_ROOT / "tests" / relative.parent / f"test_{relative.name}"


def test_every_module_has_a_test_file_of_its_name():
    """Tests mirror the package: a module's own tests are where a reader looks for them."""
    missing = []
    for path in sorted((REPO_ROOT / "jaxload").rglob("*.py")):
        name = path.relative_to(REPO_ROOT).as_posix()
        if path.name in ("__init__.py", "__main__.py") or name in NO_LOGIC:
            continue
        if not _test_file_of(path).exists():
            missing.append(f"{name} -> {_test_file_of(path).relative_to(REPO_ROOT)}")
    assert missing == []
    stale = [n for n in NO_LOGIC if not (REPO_ROOT / n).exists()]
    assert stale == []


def test_pyproject_lists_every_package_of_the_tree():
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {n for n, p in _modules().items() if p.name == "__init__.py"}
    assert set(config["packages"]) == packages
    assert "package-dir" not in config  # the tree is the package: nothing mapped elsewhere


@pytest.mark.processes
def test_the_wheel_installs_one_import_package(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(REPO_ROOT)],
        check=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("jaxload-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"jaxload"}
    assert "jaxload/converters/convert.py" in names and "jaxload/py.typed" in names


# What the runtime dependencies import by themselves (torch imports tqdm for torch.hub).
DEPENDENCIES = """
import sys
import array_record.python.array_record_module, grain, jax, numpy, pyarrow, torch
print(sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:])))
"""
TRAINER = """
import sys
import jaxload

loader = jaxload.make_loader(sys.argv[1], global_batch_size=4,
                             options=jaxload.PipelineOptions(num_workers=0),
                             host_index=0, host_count=1,
                             delta_timestamps={"action": [0.0, 0.1]})
batch = next(loader)
loader.close()
print(sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2:])))
"""


@pytest.mark.processes
def test_a_trainer_imports_no_tooling_library(tmp_path):
    from jaxload.converters.convert import convert
    from tests.support.lerobot_factory import write_lerobot_v3

    src = write_lerobot_v3(tmp_path / "src", cameras={"observation.images.top": (48, 64)})
    convert(src, tmp_path / "ds", workers=1, progress=False)

    def imported(script: str, *args: str) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", script, *args, *TOOLING_LIBRARIES],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout
        return ast.literal_eval(out.strip().splitlines()[-1])

    by_dependencies = imported(DEPENDENCIES)
    assert set(by_dependencies) <= {"tqdm"}, by_dependencies
    assert imported(TRAINER, str(tmp_path / "ds")) == by_dependencies


@pytest.mark.processes
def test_the_checker_sees_a_tooling_import():
    # The same probe, with a library the interpreter has imported: it must be reported.
    out = subprocess.run(
        [sys.executable, "-c", "import sys, json; print(sorted({m.split('.')[0] for m in "
         "sys.modules} & {'json', 'tqdm'}))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert re.fullmatch(r"\['json'\]\n", out)
