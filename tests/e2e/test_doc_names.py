"""The docs name code that exists: every dotted `jaxload.` name in README.md, docs/*.md and
benchmarks/RESULTS.md imports (a module, or an attribute of one), and every repository
path they name (`jaxload/...py`, `converters/...py`, `benchmarks/...py`, ...) is a file."""

import importlib
import re

import pytest

from tests.conftest import REPO_ROOT

DOCS = [
    REPO_ROOT / "README.md",
    REPO_ROOT / "benchmarks" / "RESULTS.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
]
# `jaxload.resolution.spec.LoaderSpec`, `jaxload.storage.remote.RemoteStore.stats` ...
DOTTED = re.compile(r"(?<![\w./\"-])jaxload(?:\.[A-Za-z_]\w*)+")
# Paths of the repository's own code: jaxload/format/reader.py, converters/convert.py, ...
PATH = re.compile(
    r"(?<![\w./-])((?:jaxload|converters|benchmarks|scripts|examples|tests)/[\w/.-]*\w)"
)


def _resolves(name: str) -> bool:
    """Whether `name` is a module, or attributes of the longest module prefix of it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _names(pattern: re.Pattern) -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for name in sorted(set(pattern.findall(doc.read_text()))):
            found.append((doc.relative_to(REPO_ROOT).as_posix(), name.rstrip(".")))
    return found


@pytest.mark.parametrize(("doc", "name"), _names(DOTTED))
def test_dotted_names_in_the_docs_exist(doc, name):
    assert _resolves(name), f"{doc} names {name}, which does not exist"


@pytest.mark.parametrize(("doc", "path"), _names(PATH))
def test_paths_in_the_docs_exist(doc, path):
    assert (REPO_ROOT / path).exists(), f"{doc} names {path}, which does not exist"


def test_the_checker_finds_a_missing_name():
    assert _resolves("jaxload.resolution.spec.LoaderSpec.state_at")
    assert not _resolves("jaxload.resolution.spec.no_such_function")
    assert not _resolves("jaxload.no_such_module")
