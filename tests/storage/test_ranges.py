"""Byte ranges through presigned URLs (jaxload.storage.ranges), against the S3 test server
on loopback (a real HTTP server: moto behind tests/support/s3_server.py)."""

from __future__ import annotations

import os

import fsspec
import pytest

from jaxload.errors import DatasetError
from jaxload.storage import ranges
from jaxload.storage.retry import AUTH, MISSING, TRANSIENT, classify
from tests.support.s3_server import S3Server

DATA = os.urandom(300_000)


@pytest.fixture(scope="module")
def server():
    server = S3Server.start()
    server.create_bucket("ranges")
    fs = server.filesystem()
    fs.pipe_file("ranges/ds/meta/info.json", b'{"format_version": 4}' * 10)
    fs.pipe_file("ranges/ds/data/blob", DATA)
    yield server
    server.stop()


@pytest.fixture
def signed(server):
    server.set(fail=None)
    return ranges.open_ranges(server.filesystem(), "ranges/ds", "s3://ranges/ds", 4, None)


@pytest.mark.processes
def test_signed_ranges_return_the_bytes_fsspec_returns(signed, server):
    assert isinstance(signed, ranges.SignedRanges)
    plain = ranges.FsspecRanges(server.filesystem(), "ranges/ds")
    for start, end in ((0, 1), (5, 70_000), (299_999, 300_000), (0, 300_000)):
        assert signed.get("data/blob", start, end) == DATA[start:end]
        assert plain.get("data/blob", start, end) == DATA[start:end]
    assert signed.get("data/blob") == DATA


@pytest.mark.processes
def test_a_refused_signature_is_signed_again_once(signed, server):
    signed.get("data/blob", 0, 10)
    _, signed_at = signed._signed["data/blob"]
    server.set(fail={"match": "data/blob", "status": 403, "count": 1})
    server.reset_counters()
    assert signed.get("data/blob", 10, 20) == DATA[10:20]
    assert server.counters()["requests"] == 2
    assert signed._signed["data/blob"][1] > signed_at  # signed again after the 403


@pytest.mark.processes
def test_errors_are_classified_by_status(signed, server):
    with pytest.raises(ranges.HTTPStatusError) as missing:
        signed.get("data/nothing", 0, 10)
    assert classify(missing.value) == MISSING and "data/nothing" in str(missing.value)
    server.set(fail={"match": "data/blob", "status": 403, "count": 2})
    with pytest.raises(ranges.HTTPStatusError) as denied:
        signed.get("data/blob", 0, 10)
    assert classify(denied.value) == AUTH
    server.set(fail={"match": "data/blob", "status": 503, "count": 1})
    with pytest.raises(ranges.HTTPStatusError) as busy:
        signed.get("data/blob", 0, 10)
    assert classify(busy.value) == TRANSIENT


@pytest.mark.processes
def test_a_dropped_connection_is_transient(server):
    fs = server.filesystem()
    signed = ranges.SignedRanges(fs, "ranges/ds", 2)
    signed.url("data/blob")
    port = server.port
    signed._signed = {k: (u.replace(f":{port}/", ":1/"), t) for k, (u, t) in signed._signed.items()}
    with pytest.raises(ConnectionError) as refused:
        signed.get("data/blob", 0, 10)
    assert classify(refused.value) == TRANSIENT


def test_a_store_that_cannot_sign_is_read_through_fsspec(tmp_path):
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_bytes(b"{}")
    fs = fsspec.filesystem("file")  # LocalFileSystem.sign: NotImplementedError
    assert isinstance(ranges.open_ranges(fs, str(tmp_path), "x", 2, None), ranges.FsspecRanges)
    assert isinstance(ranges.open_ranges(fs, str(tmp_path), "x", 2, False), ranges.FsspecRanges)
    with pytest.raises(NotImplementedError):
        ranges.open_ranges(fs, str(tmp_path), "x", 2, True)


@pytest.mark.processes
def test_signed_urls_that_read_back_wrong_are_not_used(server, monkeypatch):
    fs = server.filesystem()
    monkeypatch.setattr(
        ranges.SignedRanges, "get", lambda self, relative, start=None, end=None: b"other"
    )
    assert isinstance(ranges.open_ranges(fs, "ranges/ds", "s3://r", 2, None), ranges.FsspecRanges)
    with pytest.raises(DatasetError, match="other bytes"):
        ranges.open_ranges(fs, "ranges/ds", "s3://r", 2, True)


@pytest.mark.parametrize("transport", ["signed", "fsspec"])
@pytest.mark.processes
def test_a_stalled_store_times_out_as_a_transient_error(server, transport):
    import time

    from jaxload.storage.urls import filesystem

    # 1 s, not less: the opening probe must not time out on a loaded CI machine (it did once)
    fs, root = filesystem("s3://ranges/ds", server.storage_options(), timeout_s=1.0)
    reader = ranges.open_ranges(fs, root, "s3://ranges/ds", 2, transport == "signed", 1.0)
    assert reader.kind == transport
    server.set(latency_s=5.0)  # the store answers nothing for 5 s
    try:
        began = time.monotonic()
        with pytest.raises(Exception) as stalled:
            reader.get("data/blob", 0, 10)
        assert classify(stalled.value) == TRANSIENT
        assert time.monotonic() - began < 4.5  # gave up before the answer came
    finally:
        server.set(latency_s=0.0)
