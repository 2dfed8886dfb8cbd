"""Columns: numpy arrays in one buffer, pickled as a shared-memory file that others map."""

import os
import pickle

import numpy as np
import pytest

from jaxload.errors import SharedMemoryError
from jaxload.format import columns as columns_module
from jaxload.format.columns import Columns, ColumnsGone


def _arrays():
    return {
        "length": np.array([5, 1, 2], np.int64),
        "empty": np.zeros(0, np.int32),
        "bytes": np.frombuffer(b"abc", np.uint8),
        "matrix": np.arange(6, dtype=np.float32).reshape(2, 3),
    }


def test_columns_hold_copies_read_only_and_aligned():
    arrays = _arrays()
    columns = Columns(arrays)
    for name, array in arrays.items():
        assert columns[name].dtype == array.dtype and np.array_equal(columns[name], array)
        assert not columns[name].flags.writeable
    assert list(columns) == list(arrays) and len(columns) == 4
    assert all(columns[n].ctypes.data % columns_module.ALIGN == 0 for n in ("length", "matrix"))


def test_pickling_maps_one_shared_file_and_checks_it():
    columns = Columns(_arrays())
    data = pickle.dumps(columns)
    assert len(data) < 1000  # a reference, not the arrays
    path = os.path.join(columns_module.SHM_DIR, columns.shared_name)
    assert columns.shared_name.startswith(f"jaxload_{os.getpid()}_") and os.path.exists(path)
    again = pickle.loads(data)
    assert again.shared_name == columns.shared_name
    for name, array in _arrays().items():
        assert np.array_equal(again[name], array) and np.array_equal(columns[name], array)
    del again
    with open(path, "r+b") as f:  # the file changed after it was written: refused
        f.write(b"\xff")
    with pytest.raises(SharedMemoryError, match="changed after it was written"):
        pickle.loads(data)
    del columns
    assert not os.path.exists(path)  # removed with the columns that wrote it
    with pytest.raises(ColumnsGone, match="gone"):
        pickle.loads(data)


def test_a_shared_file_changed_under_its_writer_changes_nothing_it_reads_and_is_replaced():
    """Issue #44: the file changed under a running loader was a raw ValueError in every
    worker, again at every restart (the writer handed out the same file), and the writer's
    own columns were views of that file: they changed with it. Now the writer keeps its own
    copy, unpickling raises a SharedMemoryError, and pickling again writes a fresh file."""
    columns = Columns(_arrays())
    data = pickle.dumps(columns)
    path = os.path.join(columns_module.SHM_DIR, columns.shared_name)
    with open(path, "r+b") as f:
        f.write(b"\xff" * 8)  # length[0], as the file lays it out
    assert columns["length"].tolist() == [5, 1, 2]  # the writer reads what it wrote
    with pytest.raises(SharedMemoryError, match=r"jaxload_.*: the shared copy .* changed"):
        pickle.loads(data)
    fresh = pickle.dumps(columns)
    assert columns.shared_name != os.path.basename(path) and not os.path.exists(path)
    assert pickle.loads(fresh)["length"].tolist() == [5, 1, 2]
    assert pickle.dumps(columns) == fresh  # unchanged since: the same file


def test_without_shared_memory_columns_pickle_by_value(monkeypatch, tmp_path):
    monkeypatch.setattr(columns_module, "SHM_DIR", str(tmp_path / "missing"))
    columns = Columns(_arrays())
    again = pickle.loads(pickle.dumps(columns))
    assert columns.shared_name is None and again.shared_name is None
    assert np.array_equal(again["matrix"], _arrays()["matrix"])
