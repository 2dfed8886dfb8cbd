"""converters/files.py: a source's files by relative path, local or behind an fsspec URL
(here `file://` and fsspec's in-memory store, both real filesystems): paths outside the
root refused, downloads cached whole (never a torn file), a short transfer retried, a
missing file named. (Files.stamp: tests/converters/test_source_stamps.py.)"""

from __future__ import annotations

import fsspec
import pytest

from jaxload.converters.files import FsspecFiles, LocalFiles
from jaxload.errors import SourceError
from jaxload.storage.retry import RemoteError, RetryPolicy


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "src"
    (root / "meta" / "episodes").mkdir(parents=True)
    (root / "meta" / "info.json").write_text("{}")
    (root / "meta" / "episodes" / "file-000.parquet").write_bytes(b"p" * 7)
    (root / "videos").mkdir()
    (root / "videos" / "a.mp4").write_bytes(b"v" * 100)
    return root


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "meta/../../x", "c:/x", "..\\x"])
def test_paths_outside_the_root_are_refused_by_both(tree, tmp_path, rel):
    for files in (LocalFiles(tree), FsspecFiles(f"file://{tree}", cache_dir=tmp_path / "c")):
        with pytest.raises(SourceError, match=r"points outside the dataset; refusing"):
            files.local(rel, "data file of episode 3")
    assert LocalFiles(tree).check_inside("meta/./info.json") == "meta/./info.json"


def test_local_files_are_read_in_place(tree):
    files = LocalFiles(tree)
    assert not files.remote and files.local("videos/a.mp4") == tree / "videos/a.mp4"
    assert files.listing() == {
        "meta/info.json": 2,
        "meta/episodes/file-000.parquet": 7,
        "videos/a.mp4": 100,
    }
    assert files.glob("meta/episodes/*.parquet") == ["meta/episodes/file-000.parquet"]
    assert (files.size("videos/a.mp4"), files.size("none"), files.exists("none")) == (100, 0, False)
    with pytest.raises(SourceError, match=r"videos/b\.mp4: missing \(video of episode 2\)"):
        files.local("videos/b.mp4", "video of episode 2")
    assert files.identity() == {"kind": "local", "location": str(tree.resolve())}


def test_fsspec_files_list_once_and_download_into_the_cache(tree, tmp_path):
    files = FsspecFiles(f"file://{tree}/", cache_dir=tmp_path / "cache")
    assert files.remote and files.describe("meta/info.json") == f"file://{tree}/meta/info.json"
    assert files.glob("meta/episodes/*.parquet") == ["meta/episodes/file-000.parquet"]
    path = files.local("videos/a.mp4")
    assert path == tmp_path / "cache/videos/a.mp4" and path.read_bytes() == b"v" * 100
    assert not list(path.parent.glob(".*part"))  # written under a temp name, renamed
    (tree / "videos" / "b.mp4").write_bytes(b"new")  # the listing is fetched once
    with pytest.raises(SourceError, match=r"videos/b\.mp4: missing"):
        files.local("videos/b.mp4")
    files.evict("videos/a.mp4")
    assert not path.exists()
    other = files.with_cache_dir(tmp_path / "node")
    assert other.local("meta/info.json") == tmp_path / "node/meta/info.json"
    assert files.cache_dir == tmp_path / "cache"
    with pytest.raises(RuntimeError, match="need a cache_dir"):
        FsspecFiles(f"file://{tree}").local("meta/info.json")


def test_a_short_download_is_retried_and_then_named(tmp_path):
    store = fsspec.filesystem("memory")
    store.pipe_file("/files-test/src/v.mp4", b"v" * 10)
    sleeps = []
    policy = RetryPolicy(attempts=3, sleep=sleeps.append)
    files = FsspecFiles("memory://files-test/src", cache_dir=tmp_path, policy=policy)
    get_file = store.get_file
    cut = [2]

    def flaky(rpath, lpath, **kw):  # the first transfers stop early
        get_file(rpath, lpath)
        if cut[0]:
            cut[0] -= 1
            with open(lpath, "r+b") as f:
                f.truncate(4)

    files.fs.get_file = flaky
    try:
        assert files.local("v.mp4").read_bytes() == b"v" * 10
        assert files.retries == 2 and len(sleeps) == 2
        (tmp_path / "v.mp4").unlink()
        cut[0] = 5
        with pytest.raises(
            RemoteError,
            match=r"files-test/src/v\.mp4: giving up after 3 attempts .*received 4 bytes, the listing says 10",
        ):
            files.local("v.mp4")
        assert not list(tmp_path.iterdir())  # no torn file left in the cache
    finally:
        files.fs.get_file = get_file
        store.rm("/files-test", recursive=True)
