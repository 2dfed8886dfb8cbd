"""`ObjectStore`, the remote `DatasetStorage` (jaxload.storage.object_store): which
storage a path gets, metadata by name, refusals, and its records' reader.

Faked: the network only (`serve_locally`, tests/support/remote_fakes.py: the s3:// URL
reads a converted directory through fsspec's local filesystem, in this process)."""

from __future__ import annotations

import pytest

from jaxload.errors import DatasetError
from jaxload.format import read_info
from jaxload.format import storage as format_storage
from jaxload.storage import object_store
from jaxload.storage.object_store import ObjectStore, open_storage, remote_store_of
from tests.support.remote_fakes import serve_locally

URL = "s3://local/ds"


def test_a_url_opens_an_object_store_and_a_directory_a_local_one(small_converted):
    assert isinstance(open_storage(URL), ObjectStore)
    assert isinstance(open_storage(small_converted), format_storage.LocalDirectory)
    assert open_storage(URL, remote={"cache_bytes": 1 << 20}).remote.cache_bytes == 1 << 20


def test_only_a_local_directory_has_a_local_path(small_converted):
    """`local_path`: what the reader, the episode cache and the doctor ask instead of the
    storage's class (stat a file, check records at open, read every record directly)."""
    assert open_storage(URL).local_path is None
    assert open_storage(small_converted).local_path == str(small_converted)


def test_metadata_is_read_by_name_and_a_missing_object_is_none(monkeypatch, small_converted):
    serve_locally(monkeypatch, URL, small_converted)
    store = ObjectStore(URL)
    info = (small_converted / "meta" / "info.json").read_bytes()
    assert store.read("meta/info.json") == info
    assert store.read("meta/nothing.json") is None
    assert store.where("meta/info.json") == "s3://local/ds/meta/info.json"
    with pytest.raises(PermissionError, match=r"s3://local/ds/meta/x\.json: jaxload writes no"):
        store.write("meta/x.json", b"{}")


def test_a_metadata_object_larger_than_any_is_refused_naming_it(monkeypatch, small_converted):
    serve_locally(monkeypatch, URL, small_converted)
    monkeypatch.setattr(object_store, "MAX_META_BYTES", 16)
    with pytest.raises(DatasetError, match=r"s3://local/ds/meta/info\.json: larger than"):
        ObjectStore(URL).read("meta/info.json")


def test_its_record_reader_reads_the_records_a_local_read_returns(monkeypatch, small_converted):
    serve_locally(monkeypatch, URL, small_converted)
    info = read_info(small_converted)
    reader = ObjectStore(URL).record_reader(info, None)
    local = format_storage.LocalDirectory(small_converted).record_reader(info, None)
    try:
        assert remote_store_of(reader) is reader.store
        assert remote_store_of(local) is None
        assert reader.read(0, [0, 1]) == local.read(0, [0, 1])
    finally:
        reader.close()
        reader.store.close()
        local.close()
