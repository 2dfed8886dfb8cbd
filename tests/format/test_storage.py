"""Where a converted dataset's files are (jaxload.format.storage): the local directory's
`DatasetStorage`, metadata parquet files read through any storage, and `as_storage`.
The object store's side is in tests/storage/test_object_store.py."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxload.errors import DatasetError
from jaxload.format import layout
from jaxload.format.reader import read_info
from jaxload.format.storage import (
    DatasetStorage,
    LocalDirectory,
    RecordReader,
    as_storage,
    open_parquet,
    read_parquet,
)


def test_a_local_directory_is_a_dataset_storage_with_its_path(tmp_path):
    storage = LocalDirectory(tmp_path)
    assert isinstance(storage, DatasetStorage)
    assert storage.local_path == storage.name == str(tmp_path)  # what reads it directly
    assert storage.where("meta/info.json") == os.path.join(tmp_path, "meta/info.json")
    assert repr(storage) == f"LocalDirectory({str(tmp_path)!r})"


def test_files_are_read_by_name_and_a_missing_one_is_none(tmp_path):
    storage = LocalDirectory(tmp_path)
    (tmp_path / "meta").mkdir()
    storage.write("meta/x.json", b"{}")
    assert storage.read("meta/x.json") == b"{}"
    storage.write("meta/x.json", b"[1]")  # replaced whole
    assert storage.read("meta/x.json") == b"[1]"
    assert [p.name for p in (tmp_path / "meta").iterdir()] == ["x.json"]  # no temporary left
    assert storage.read("meta/none.json") is None
    assert storage.read("meta/x.json/below") is None  # a file where a folder would be
    assert LocalDirectory(tmp_path / "nowhere").read("meta/x.json") is None


def test_a_file_that_exists_but_cannot_be_read_names_it(tmp_path):
    (tmp_path / "meta" / "info.json").mkdir(parents=True)  # a folder: read() fails
    with pytest.raises(DatasetError, match=rf"^{tmp_path}/meta/info\.json: unreadable"):
        LocalDirectory(tmp_path).read("meta/info.json")


def test_its_record_reader_reads_verified_payloads(camera_converted):
    storage = LocalDirectory(camera_converted)
    info = read_info(storage)
    reader = storage.record_reader(info, None)
    try:
        assert isinstance(reader, RecordReader)
        blocks = reader.read(0, [0])
        assert len(blocks[0]) == 5 * info.frame_dtype.itemsize  # episode 0: 5 frames
    finally:
        reader.close()


def _write_parquet(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def test_parquet_files_are_read_with_the_columns_asked_for(tmp_path):
    _write_parquet(tmp_path / "meta/t.parquet", pa.table({"a": [1, 2], "b": ["x", "y"]}))
    storage = LocalDirectory(tmp_path)
    assert read_parquet(storage, "meta/t.parquet").column_names == ["a", "b"]
    assert read_parquet(storage, "meta/t.parquet", ["b"]).to_pydict() == {"b": ["x", "y"]}
    opened = open_parquet(storage, "meta/t.parquet", ["a"])
    assert opened.read(["a"]).to_pydict() == {"a": [1, 2]} and opened.path.endswith("t.parquet")


def test_a_parquet_file_missing_corrupt_or_short_of_a_column_is_named(tmp_path):
    storage = LocalDirectory(tmp_path)
    path = tmp_path / "meta/t.parquet"
    with pytest.raises(DatasetError, match=rf"{path}: missing; is {tmp_path} a jaxload dataset"):
        read_parquet(storage, "meta/t.parquet")
    _write_parquet(path, pa.table({"a": [1, 2]}))
    with pytest.raises(DatasetError, match=rf"{path}: columns \['b', 'c'\] missing"):
        read_parquet(storage, "meta/t.parquet", ["a", "b", "c"])
    path.write_bytes(b"PAR1 not a parquet file PAR1")
    with pytest.raises(DatasetError, match=rf"{path}: unreadable parquet"):
        read_parquet(storage, "meta/t.parquet")


def test_a_parquet_file_damaged_inside_a_column_is_named_when_read(tmp_path):
    path = tmp_path / layout.TASKS_PATH
    _write_parquet(path, pa.table({"a": list(range(1000))}))
    data = bytearray(path.read_bytes())
    data[100:400] = b"\xff" * 300  # the column's pages, not the footer
    path.write_bytes(bytes(data))
    opened = open_parquet(LocalDirectory(tmp_path), layout.TASKS_PATH, ["a"])
    with pytest.raises(DatasetError, match=rf"{path}: unreadable parquet"):
        opened.read(["a"])


def test_as_storage_takes_a_path_or_a_storage_and_nothing_else(tmp_path):
    for where in (tmp_path, str(tmp_path)):
        storage = as_storage(where)
        assert isinstance(storage, LocalDirectory) and storage.local_path == str(tmp_path)
    same = LocalDirectory(tmp_path)
    assert as_storage(same) is same
    with pytest.raises(TypeError, match="expected a dataset directory or a DatasetStorage"):
        as_storage(42)
