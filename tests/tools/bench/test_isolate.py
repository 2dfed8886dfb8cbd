"""A measurement in a fresh process (jaxload.tools.bench.isolate): its value comes back, its
error comes back with the child's traceback, and a child that dies is said to have died."""

import math
import os

import pytest

from jaxload.tools.bench.isolate import in_fresh_process

pytestmark = pytest.mark.processes


def test_the_value_comes_back_from_a_spawned_process():
    assert in_fresh_process(os.getpid) != os.getpid()
    assert in_fresh_process(sorted, [3, 1, 2], reverse=True) == [3, 2, 1]


def test_an_error_in_the_child_names_the_function_and_its_traceback():
    with pytest.raises(RuntimeError, match=r"(?s)sqrt failed in its process:.*math domain error"):
        in_fresh_process(math.sqrt, -1.0)


def test_a_child_that_dies_is_reported_with_its_exit_code():
    with pytest.raises(RuntimeError, match=r"(?s)_exit failed .*died \(exit code 7\)"):
        in_fresh_process(os._exit, 7)
