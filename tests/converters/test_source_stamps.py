"""What a resumed conversion compares to notice a source file changed (Files.stamp)."""

import os

from jaxload.converters.files import FsspecFiles, LocalFiles


def _rewrite_same_size(path, data: bytes, later_ns: int = 1) -> None:
    before = os.stat(path)
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + later_ns))


def test_a_local_file_rewritten_in_place_changes_its_stamp(tmp_path):
    path = tmp_path / "data" / "file-000.parquet"
    path.parent.mkdir()
    path.write_bytes(b"old values")
    files = LocalFiles(tmp_path)
    before = files.stamp("data/file-000.parquet")
    assert before["size"] == 10
    assert files.stamp("data/file-000.parquet") == before  # unchanged: the same stamp
    _rewrite_same_size(path, b"new values")
    assert files.stamp("data/file-000.parquet") != before
    assert files.stamp("data/missing.parquet") == {"size": 0}


def test_a_remote_file_stamp_holds_the_version_the_store_lists(tmp_path):
    path = tmp_path / "data.parquet"
    path.write_bytes(b"old values")
    before = FsspecFiles(f"file://{tmp_path}").stamp("data.parquet")
    assert before["size"] == 10 and "mtime" in before
    _rewrite_same_size(path, b"new values", later_ns=10**9)
    assert FsspecFiles(f"file://{tmp_path}").stamp("data.parquet") != before
