"""Columns: numpy arrays in one buffer, pickled as a shared-memory file that others map."""

import os
import pickle

import numpy as np
import pytest

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
    with open(path, "r+b") as f:  # the file changed after it was written: refused
        f.write(b"\xff")
    with pytest.raises(ValueError, match="changed after they were written"):
        pickle.loads(data)
    del columns, again
    assert not os.path.exists(path)  # removed with the columns that wrote it
    with pytest.raises(ColumnsGone, match="gone"):
        pickle.loads(data)


def test_without_shared_memory_columns_pickle_by_value(monkeypatch, tmp_path):
    monkeypatch.setattr(columns_module, "SHM_DIR", str(tmp_path / "missing"))
    columns = Columns(_arrays())
    again = pickle.loads(pickle.dumps(columns))
    assert columns.shared_name is None and again.shared_name is None
    assert np.array_equal(again["matrix"], _arrays()["matrix"])
