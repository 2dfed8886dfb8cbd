"""Every `>>>` example in the package's docstrings runs, and prints what it says.

They run in a directory holding `data/demo` (a LeRobot v3.0 dataset written by the test
factory: 4 episodes of 5, 1, 2 and 12 frames at 10 fps, one 48x64 camera) and `out/demo`
(its conversion), the paths the examples use. Examples that need the network or a
simulator are `Example::` blocks instead, which are illustrations and not run.
"""

import doctest
import importlib

import numpy as np
import pytest

import jaxload
from tests.test_layout import _modules

pytestmark = pytest.mark.integration

MODULES = sorted(
    name
    for name, path in _modules().items()
    if ">>>" in path.read_text() and not name.startswith("jaxload.tools.bench")
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from jaxload.converters.convert import convert
    from tests.support.lerobot_factory import write_lerobot_v3

    root = tmp_path_factory.mktemp("docs")
    src = write_lerobot_v3(root / "data" / "demo", cameras={"observation.images.top": (48, 64)})
    convert(src, root / "out" / "demo", workers=1, progress=False)
    return root


def test_the_examples_are_found():
    assert {"jaxload.dataset", "jaxload.windows", "jaxload.converters.plan"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = doctest.DocTestFinder().find(
        module, globs={**vars(module), "jaxload": jaxload, "np": np}
    )
    examples = 0
    for test in tests:
        examples += len(test.examples)
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert examples > 0 and result.failed == 0, f"{result.failed} of {examples} examples failed"
