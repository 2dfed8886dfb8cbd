"""The files of a source dataset, wherever they live: a local directory or an fsspec URL.

Readers address files by their path relative to the dataset root and ask for a local
copy only when they need its bytes (`local`), so a remote conversion downloads the
metadata first and then, per episode, just that episode's data and video files. Remote
copies land in a cache directory, written under a temp name and renamed, so a cache
never holds a torn file. The hub has its own implementation in `converters/hub.py`.

Example::

    files = open_files("gs://bucket/lerobot/pusht", cache_dir="/tmp/cache")
    info = json.loads(files.local("meta/info.json").read_text())
"""

from __future__ import annotations

import abc
import copy
import fnmatch
import os
import posixpath
import uuid
from pathlib import Path
from typing import Any

from jaxload.errors import SourceError
from jaxload.storage.retry import RetryCounter, RetryPolicy, call_with_retries


class Files(abc.ABC):
    """Read access to one dataset's files, by path relative to its root ("meta/info.json")."""

    def __init__(self) -> None:
        self.counter = RetryCounter()

    @property
    def retries(self) -> int:
        """Transient errors this object retried so far (in this process)."""
        return self.counter.retries

    @abc.abstractmethod
    def describe(self, rel: str) -> str:
        """How error messages name the file: a path or a URL."""

    @abc.abstractmethod
    def local(self, rel: str, what: str | None = None) -> Path:
        """A local path holding the file's bytes (fetched if need be).

        Raises SourceError "<file>: missing (<what>)" when the file does not exist.
        """

    @abc.abstractmethod
    def listing(self) -> dict[str, int]:
        """Every file of the dataset with its size in bytes."""

    @abc.abstractmethod
    def identity(self) -> dict[str, Any]:
        """What identifies this source in a conversion plan (kind, location, revision)."""

    @property
    def remote(self) -> bool:
        return True

    def exists(self, rel: str) -> bool:
        return rel in self.listing()

    def size(self, rel: str) -> int:
        """Size in bytes, or 0 when the file does not exist."""
        return self.listing().get(rel, 0)

    def stamp(self, rel: str) -> dict[str, Any]:
        """What changes when the file is rewritten, for a resumed conversion to notice
        (a unit converted from other bytes is converted again): its size here; the
        listing's version where the store has one (subclasses)."""
        return {"size": self.size(rel)}

    def glob(self, pattern: str) -> list[str]:
        """Sorted relative paths matching a glob pattern ("meta/episodes/*/*.parquet")."""
        return sorted(p for p in self.listing() if fnmatch.fnmatchcase(p, pattern))

    def read_bytes(self, rel: str, what: str | None = None) -> bytes:
        return self.local(rel, what).read_bytes()

    def check_inside(self, rel: str, what: str | None = None) -> str:
        """`rel`, or a SourceError when it points outside the dataset root.

        Paths come from the source's own metadata (info.json templates, episode rows), so a
        crafted dataset could name `../../etc/passwd` or an absolute path. The check is on
        the path as written: symlinks inside the root are the owner's choice (a hub cache
        snapshot is made of them)."""
        normal = posixpath.normpath(rel.replace("\\", "/"))
        if posixpath.isabs(normal) or normal == ".." or normal.startswith("../") or ":" in normal:
            raise SourceError(
                f"{self.describe('')}: path {rel!r}"
                + (f" ({what})" if what else "")
                + " points outside the dataset; refusing to read it (check meta/info.json's "
                "path templates and the episode metadata)"
            )
        return rel

    def evict(self, rel: str) -> None:  # noqa: B027 (optional hook: local files stay)
        """Drops the cached copy of a file nobody needs any more (remote sources only)."""

    def with_cache_dir(self, cache_dir: str | os.PathLike) -> Files:
        """A copy that caches into another directory (a Ray task on another node)."""
        clone = copy.copy(self)
        clone.cache_dir = Path(cache_dir)
        return clone


class LocalFiles(Files):
    """A dataset directory on a local (or network-mounted) filesystem: read in place."""

    def __init__(self, root: str | os.PathLike):
        super().__init__()
        self.root = Path(root)
        self.cache_dir = None

    @property
    def remote(self) -> bool:
        return False

    def describe(self, rel: str) -> str:
        return str(self.root / rel)

    def local(self, rel: str, what: str | None = None) -> Path:
        path = self.root / self.check_inside(rel, what)
        if not path.is_file():
            raise SourceError(f"{path}: missing" + (f" ({what})" if what else ""))
        return path

    def listing(self) -> dict[str, int]:
        return {
            p.relative_to(self.root).as_posix(): p.stat().st_size
            for p in self.root.rglob("*")
            if p.is_file()
        }

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def size(self, rel: str) -> int:
        path = self.root / rel
        return path.stat().st_size if path.is_file() else 0

    def glob(self, pattern: str) -> list[str]:
        return sorted(
            p.relative_to(self.root).as_posix() for p in self.root.glob(pattern) if p.is_file()
        )

    def stamp(self, rel: str) -> dict[str, Any]:
        """Size, mtime and ctime (nanoseconds): a file fixed in place changes its mtime, and
        one replaced keeping its size and mtime (`cp -p`, `rsync -t`) its ctime."""
        try:
            st = (self.root / rel).stat()
        except OSError:
            return {"size": 0}
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}

    def identity(self) -> dict[str, Any]:
        return {"kind": "local", "location": str(self.root.resolve())}


class CachedRemoteFiles(Files):
    """Shared logic of remote sources: a lazily fetched listing and a download cache."""

    def __init__(self, cache_dir: str | os.PathLike | None, policy: RetryPolicy):
        super().__init__()
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.policy = policy
        self._listing: dict[str, int] | None = None

    def listing(self) -> dict[str, int]:
        if self._listing is None:
            self._listing = self._retry(self._fetch_listing, self.describe(""))
        return self._listing

    def local(self, rel: str, what: str | None = None) -> Path:
        if self.cache_dir is None:
            raise RuntimeError("remote files need a cache_dir before they can be read")
        self.check_inside(rel, what)
        if not self.exists(rel):  # known from the listing: no request for a missing file
            raise SourceError(f"{self.describe(rel)}: missing" + (f" ({what})" if what else ""))
        return self._retry(lambda: self._download(rel), self.describe(rel), missing=what)

    def _retry(self, fn, what: str, missing: str | None = None):
        return call_with_retries(
            fn, what=what, policy=self.policy, counter=self.counter, missing=missing
        )

    @abc.abstractmethod
    def _fetch_listing(self) -> dict[str, int]: ...

    @abc.abstractmethod
    def _download(self, rel: str) -> Path: ...


class IncompleteDownload(ConnectionError):
    """A fetched file is shorter or longer than the listing says: a dropped transfer."""


# What fsspec filesystems list that changes when an object is rewritten (s3fs, gcsfs,
# adlfs, local, hf): compared as strings.
_VERSION_KEYS = (
    "ETag",
    "etag",
    "generation",
    "md5Hash",
    "crc32c",
    "LastModified",
    "mtime",
    "created",
)


class FsspecFiles(CachedRemoteFiles):
    """A dataset under an fsspec URL (gs://, s3://, hf://, file://, ...).

    `fs` may be given (an already configured filesystem, or a fault-injecting one in tests);
    otherwise it comes from `jaxload.storage.urls.filesystem(url, storage_options)`: the
    same timeouts, and for s3:// the same single retry loop (jaxload's, not botocore's
    under it), as the loader's reads.
    """

    def __init__(
        self,
        url: str,
        *,
        cache_dir: str | os.PathLike | None = None,
        policy: RetryPolicy | None = None,
        fs: Any = None,
        storage_options: dict[str, Any] | None = None,
    ):
        super().__init__(cache_dir, policy or RetryPolicy())
        from jaxload.storage.urls import filesystem

        self.url = url.rstrip("/")
        if fs is None:
            fs, root = filesystem(self.url, storage_options)
        else:
            root = fs._strip_protocol(self.url)
        self.fs, self.root = fs, root.rstrip("/")
        self._versions: dict[str, dict[str, str]] = {}

    def describe(self, rel: str) -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def identity(self) -> dict[str, Any]:
        return {"kind": "fsspec", "location": self.url}

    def stamp(self, rel: str) -> dict[str, Any]:
        """Size, and the version the store lists (ETag, generation, checksum or mtime)."""
        self.listing()
        return {"size": self.size(rel), **self._versions.get(rel, {})}

    def _fetch_listing(self) -> dict[str, int]:
        found = self.fs.find(self.root, detail=True)
        prefix = self.root + "/"
        files = {
            name[len(prefix) :]: entry
            for name, entry in found.items()
            if name.startswith(prefix) and entry.get("type", "file") == "file"
        }
        self._versions = {
            rel: {k: str(entry[k]) for k in _VERSION_KEYS if entry.get(k) is not None}
            for rel, entry in files.items()
        }
        return {rel: int(entry.get("size") or 0) for rel, entry in files.items()}

    def _download(self, rel: str) -> Path:
        dest = self.cache_dir / rel
        expected = self.size(rel)
        if dest.is_file() and dest.stat().st_size == expected:
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:12]}.part")
        try:
            self.fs.get_file(f"{self.root}/{rel}", str(tmp))
            got = tmp.stat().st_size
            if got != expected:
                raise IncompleteDownload(f"received {got} bytes, the listing says {expected}")
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        return dest

    def evict(self, rel: str) -> None:
        if self.cache_dir is not None:
            (self.cache_dir / rel).unlink(missing_ok=True)
