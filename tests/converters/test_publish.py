"""converters/publish.py on fsspec's in-memory filesystem (`memory://`, a real fsspec
store in this process; tests/converters/test_convert_to_s3.py runs the same against an S3
server): the staging directory, OUT's forms, the emptiness checks, the upload's order
(meta/info.json last), its resume and its refusals."""

from __future__ import annotations

import json
import uuid

import fsspec
import pytest

from jaxload.converters.publish import (
    UPLOAD_RECORD,
    Destination,
    PublishError,
    resolve_out,
    staging_dir,
)
from jaxload.errors import JaxloadError
from jaxload.storage.retry import RetryPolicy


@pytest.fixture
def url():
    """A fresh prefix of the in-memory store (shared by the process: a unique name)."""
    name = f"memory://publish-{uuid.uuid4().hex}/ds"
    yield name
    store = fsspec.filesystem("memory")
    bucket = "/" + name.partition("://")[2].split("/")[0]
    if store.exists(bucket):
        store.rm(bucket, recursive=True)


@pytest.fixture
def local(tmp_path):
    """A finished dataset tree as the converter leaves it (the upload reads only info.json)."""
    root = tmp_path / "local"
    (root / "data").mkdir(parents=True)
    (root / "data" / "shard-00000.array_record").write_bytes(b"x" * 1000)
    (root / "data" / "shard-00000.offsets").write_bytes(b"o" * 10)
    info = {"fingerprint": "f1", "total_episodes": 2, "total_frames": 8}
    (root / "meta").mkdir()
    (root / "meta" / "info.json").write_text(json.dumps(info))
    return root


def _store():
    return fsspec.filesystem("memory")


def test_staging_dir_is_a_pure_function_of_the_url(tmp_path):
    a = staging_dir("s3://bucket/team/pusht", tmp_path)
    assert a == staging_dir("s3://bucket/team/pusht/", tmp_path)
    assert a.parent == tmp_path and a.name.startswith("pusht-")
    assert staging_dir("s3://bucket/team/other", tmp_path) != a
    assert staging_dir("s3://", tmp_path).name.startswith("dataset-")


def test_resolve_out_local_and_url(tmp_path):
    assert resolve_out(tmp_path / "o", None, False, None, None) == (None, tmp_path / "o")
    with pytest.raises(JaxloadError, match="apply only to a URL OUT"):
        resolve_out(tmp_path / "o", None, True, None, None)
    with pytest.raises(JaxloadError, match="apply only to a URL OUT"):
        resolve_out(tmp_path / "o", tmp_path, False, None, None)
    url = "s3://bucket/ds"  # building s3fs' filesystem asks nothing of the network
    target, local = resolve_out(url + "/", tmp_path, False, {"anon": True}, None)
    assert (target.url, target.scheme) == (url, "s3") and local == staging_dir(url, tmp_path)


def test_a_read_only_scheme_is_refused():
    with pytest.raises(PublishError, match=r"https://host/ds: https:// is read-only"):
        Destination("https://host/ds")


def test_upload_puts_info_json_last_and_records_the_upload(url, local, tmp_path):
    target = Destination(url)
    order = []
    put_file = target.fs.put_file
    target.fs.put_file = lambda lpath, rpath, **kw: (order.append(rpath), put_file(lpath, rpath))
    partial = tmp_path / "partial"
    partial.mkdir()
    uploaded = target.upload(local, partial, progress=False)
    assert (uploaded.files, uploaded.skipped) == (3, 0)
    assert order[-1].endswith("/ds/meta/info.json") and len(order) == 3
    assert target.listing() == {
        "data/shard-00000.array_record": 1000,
        "data/shard-00000.offsets": 10,
        "meta/info.json": len((local / "meta/info.json").read_bytes()),
    }
    record = json.loads((partial / UPLOAD_RECORD).read_text())
    assert record["complete"] and record["url"] == url and record["frames"] == 8


def test_an_interrupted_upload_is_finished_by_the_same_conversion(url, local, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / UPLOAD_RECORD).write_text(json.dumps({"url": url, "fingerprint": "f1"}))
    fs, root = Destination(url).fs, url.partition("://")[2]
    fs.pipe_file(f"/{root}/data/shard-00000.offsets", b"o" * 10)  # what the first run put
    target = Destination(url)
    target.refuse_unless_ours(partial)  # ours: no refusal
    uploaded = target.upload(local, partial, progress=False)
    assert (uploaded.files, uploaded.skipped) == (2, 1)
    # run again after completion: nothing to do
    assert target.upload(local, partial, progress=False).skipped == 3


def test_a_destination_holding_anything_else_is_refused_untouched(url, local, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    fs, root = _store(), url.partition("://")[2]
    fs.pipe_file(f"/{root}/notes.txt", b"mine")
    target = Destination(url)
    with pytest.raises(PublishError, match=r"already holds 1 object\(s\) \(e\.g\. .*notes\.txt\)"):
        target.refuse_unless_ours(partial)
    with pytest.raises(PublishError, match="refusing to write into a prefix"):
        target.upload(local, partial, progress=False)
    fs.pipe_file(f"/{root}/meta/info.json", b"{}")
    with pytest.raises(PublishError, match="already holds a jaxload dataset"):
        target.refuse_unless_ours(partial)
    assert not (partial / UPLOAD_RECORD).exists()
    assert sorted(target.listing()) == ["meta/info.json", "notes.txt"]


def test_our_record_with_foreign_objects_or_another_fingerprint_is_refused(url, local, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    fs, root = _store(), url.partition("://")[2]
    (partial / UPLOAD_RECORD).write_text(json.dumps({"url": url, "fingerprint": "f1"}))
    fs.pipe_file(f"/{root}/data/shard-00000.offsets", b"short")  # wrong size
    with pytest.raises(PublishError, match=r"holds 1 object\(s\) this conversion did not write"):
        Destination(url).upload(local, partial, progress=False)
    (partial / UPLOAD_RECORD).write_text(json.dumps({"url": url, "fingerprint": "other"}))
    with pytest.raises(PublishError, match="refusing to write into a prefix"):
        Destination(url).upload(local, partial, progress=False)


def test_a_short_upload_is_retried_then_said_with_the_objects_url(url, local, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    target = Destination(url, policy=RetryPolicy(attempts=2, sleep=lambda s: None))
    put_file = target.fs.put_file
    calls = []

    def truncating(lpath, rpath, **kw):
        calls.append(rpath)
        target.fs.pipe_file(rpath, b"cut")

    target.fs.put_file = truncating
    with pytest.raises(PublishError, match=r"ds/data/shard-00000\.(array_record|offsets)"):
        target.upload(local, partial, progress=False)
    assert len(calls) >= 2 and not any(c.endswith("info.json") for c in calls)
    target.fs.put_file = put_file
