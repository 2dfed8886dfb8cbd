"""Where a remote dataset's records lie (jaxload.storage.offsets.OffsetIndex): the offset
index beside each shard, checked against info.json, and the version check.

Faked: the network only (`serve_locally`, tests/support/remote_fakes.py: the s3:// URL
reads a copy of a converted directory through fsspec's local filesystem)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import shutil

import numpy as np
import pytest

from jaxload.errors import CorruptRecordError, DatasetChangedError
from jaxload.format import layout, read_info
from jaxload.storage.offsets import OffsetIndex
from jaxload.storage.options import RemoteOptions
from jaxload.storage.transport import Transport
from tests.support.remote_fakes import serve_locally

URL = "s3://local/ds"


@pytest.fixture
def copy(small_converted, tmp_path, monkeypatch):
    root = shutil.copytree(small_converted, tmp_path / "ds")
    serve_locally(monkeypatch, URL, root)
    return root


def _index(root):
    info = read_info(root)
    return OffsetIndex(Transport(URL, RemoteOptions(), {}), info), info


def test_the_offsets_are_each_shards_record_boundaries_and_place_records_in_order(copy):
    index, info = _index(copy)
    with cf.ThreadPoolExecutor(2) as pool:
        index.load(range(info.num_shards), lambda: pool)
    assert info.num_shards >= 2 and len(index.loaded) == info.num_shards
    for shard in range(info.num_shards):
        offsets = index.of(shard)
        assert len(offsets) == info.shard_records[shard] + 1 and offsets[0] >= 0
        assert offsets[-1] <= (copy / layout.shard_path(shard)).stat().st_size
        assert np.all(np.diff(offsets) > 0)
    assert index.dataset_bytes() == sum(int(index.of(s)[-1]) for s in range(info.num_shards))
    keys = np.array([(s, r) for s in range(info.num_shards) for r in range(info.shard_records[s])])
    phases, sizes = index.place(keys)
    assert np.all(np.diff(phases) > 0) and phases[0] >= 0 and phases[-1] < 1
    np.testing.assert_array_equal(
        sizes, np.concatenate([np.diff(index.of(s)) for s in range(info.num_shards)])
    )


def test_a_damaged_offset_index_is_refused_naming_it(copy):
    index, _ = _index(copy)
    path = copy / layout.offsets_path(1)
    data = bytearray(path.read_bytes())
    data[3] ^= 0xFF
    path.write_bytes(bytes(data))
    index.fetch(0)  # another shard's reads on
    with pytest.raises(
        CorruptRecordError, match=rf"{URL}/{layout.offsets_path(1)}: does not match"
    ):
        index.fetch(1)


def test_a_dataset_replaced_in_storage_is_said_to_be_another_version(copy):
    index, info = _index(copy)
    raw = json.loads((copy / layout.INFO_PATH).read_text())
    raw["fingerprint"] = "0" * len(str(info.fingerprint))
    (copy / layout.INFO_PATH).write_text(json.dumps(raw))
    with pytest.raises(DatasetChangedError, match="another version than the one opened"):
        index.fetch(0)
    assert 0 not in index
