"""Errors jaxload raises (jaxload.errors): one base to catch them all, the builtin bases
callers already catch, and every one surviving the trip from a worker process (pickling)
as itself, with its attributes."""

from __future__ import annotations

import inspect
import pickle

import pytest

from jaxload import errors
from jaxload.errors import JaxloadError, RemoteError, WorkerDiedError

ALL = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, JaxloadError)]


def test_every_error_is_a_jaxload_error_and_the_builtin_it_stands_for():
    assert len(ALL) >= 14
    assert issubclass(errors.WindowError, ValueError)  # bad delta_timestamps
    assert issubclass(errors.BatchTransformError, TypeError)
    assert issubclass(errors.UnguardedScriptError, RuntimeError)
    assert issubclass(errors.CorruptRecordError, errors.DatasetError)
    assert issubclass(errors.DatasetChangedError, errors.DatasetError)
    assert not issubclass(RemoteError, errors.DatasetError | errors.SourceError)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_error_unpickles_as_itself_with_its_message(cls):
    error = pickle.loads(pickle.dumps(cls("ds/meta/info.json: what went wrong")))
    assert type(error) is cls and str(error) == "ds/meta/info.json: what went wrong"


def test_attributes_survive_pickling():
    remote = pickle.loads(pickle.dumps(RemoteError("s3://b/ds: gone", kind="missing")))
    assert remote.kind == "missing" and RemoteError("x").kind == "permanent"
    died = WorkerDiedError("worker 7 died")
    died.pid, died.signal, died.position = 7, 9, 128
    back = pickle.loads(pickle.dumps(died))
    assert (back.pid, back.signal, back.status, back.position) == (7, 9, None, 128)
