"""Stand-ins for remote storage, with injected faults.

The network cannot exist where these tests run, so the one thing mocked is the transport:
`LocalHub` is a directory standing in for the Hugging Face Hub behind the converter's
`HubClient` protocol, and `FaultyFileSystem` is fsspec's real local filesystem whose reads
fail as told. The errors raised are the real exception types huggingface_hub, httpx and
the OS raise, so the converter's classification is tested as it runs against the hub.
Fault counters live in files, so worker processes share them.
"""

from __future__ import annotations

import dataclasses
import fcntl
import fnmatch
import hashlib
import os
import shutil
import uuid
from pathlib import Path

import httpx2
from fsspec.implementations.local import LocalFileSystem
from huggingface_hub.errors import HfHubHTTPError, RemoteEntryNotFoundError, RepositoryNotFoundError

SHA = "0123456789abcdef0123456789abcdef01234567"


@dataclasses.dataclass(frozen=True)
class Faults:
    """Which reads fail: the first `transient` attempts at each file matching `pattern`
    fail with a transient error (cycling through `kinds`); files matching `permanent`
    always fail with HTTP `permanent_status`."""

    state_dir: str
    transient: int = 0
    pattern: str = "*"
    kinds: tuple[str, ...] = ("503", "reset", "timeout", "429")
    permanent: str | None = None
    permanent_status: int = 404

    def before_read(self, name: str, url: str) -> None:
        """Raises the fault due for this attempt at `name`, if any; counts the attempt."""
        attempt = self._count(name)
        if self.permanent and fnmatch.fnmatchcase(name, self.permanent):
            raise _http_error(self.permanent_status, url)
        if fnmatch.fnmatchcase(name, self.pattern) and attempt < self.transient:
            raise _transient(self.kinds[attempt % len(self.kinds)], url)

    def attempts(self, name: str) -> int:
        path = self._counter(name)
        return int(path.read_text() or 0) if path.exists() else 0

    def total_failures(self) -> int:
        """Transient failures injected so far, over every file."""
        counts = [int(p.read_text() or 0) for p in Path(self.state_dir).glob("*.count")]
        return sum(min(c, self.transient) for c in counts)

    def _counter(self, name: str) -> Path:
        return Path(self.state_dir) / f"{hashlib.sha256(name.encode()).hexdigest()[:16]}.count"

    def _count(self, name: str) -> int:
        Path(self.state_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(self.state_dir) / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            attempt = self.attempts(name)
            self._counter(name).write_text(str(attempt + 1))
        return attempt


def _transient(kind: str, url: str) -> Exception:
    request = httpx2.Request("GET", url)
    if kind == "reset":
        return httpx2.ReadError("[Errno 104] Connection reset by peer", request=request)
    if kind == "timeout":
        return httpx2.ReadTimeout("The read operation timed out", request=request)
    return _http_error(int(kind), url)


def _http_error(status: int, url: str) -> Exception:
    response = httpx2.Response(status, request=httpx2.Request("GET", url))
    message = f"{status} Error for url: {url}"
    if status == 404:
        return RemoteEntryNotFoundError(
            f"404 Client Error. Entry Not Found for url: {url}", response=response
        )
    return HfHubHTTPError(message, response=response)


class LocalHub:
    """A directory of `<owner>/<name>/` dataset repos served as the hub would serve them."""

    endpoint = "local-hub"

    def __init__(self, root: str | os.PathLike, faults: Faults | None = None):
        self.root = str(root)
        self.faults = faults

    def repo_files(self, repo_id: str, revision: str | None) -> tuple[str, dict[str, int]]:
        repo = Path(self.root) / repo_id
        url = f"https://huggingface.co/api/datasets/{repo_id}/revision/{revision}"
        if self.faults:
            self.faults.before_read(f"api:{repo_id}", url)
        if not repo.is_dir():
            response = httpx2.Response(404, request=httpx2.Request("GET", url))
            raise RepositoryNotFoundError(
                f"404 Client Error. Repository Not Found for url: {url}", response=response
            )
        files = {
            p.relative_to(repo).as_posix(): p.stat().st_size for p in repo.rglob("*") if p.is_file()
        }
        return SHA, files

    def download(self, repo_id: str, filename: str, revision: str, cache_dir: str) -> str:
        url = f"https://huggingface.co/datasets/{repo_id}/resolve/{revision}/{filename}"
        if self.faults:
            self.faults.before_read(filename, url)
        src = Path(self.root) / repo_id / filename
        if not src.is_file():
            raise _http_error(404, url)
        dest = Path(self.cached_path_for(repo_id, filename, revision, cache_dir))
        if not dest.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}")
            shutil.copyfile(src, tmp)
            os.replace(tmp, dest)
            self._log(cache_dir, filename)
        return str(dest)

    def cached_path(self, repo_id: str, filename: str, revision: str, cache_dir: str) -> str | None:
        path = self.cached_path_for(repo_id, filename, revision, cache_dir)
        return path if os.path.isfile(path) else None

    @staticmethod
    def cached_path_for(repo_id: str, filename: str, revision: str, cache_dir: str) -> str:
        return os.path.join(cache_dir, "local-hub", repo_id, revision, filename)

    def _log(self, cache_dir: str, filename: str) -> None:
        """Every download, one line each (tests check what was fetched)."""
        if self.faults:
            with open(Path(self.faults.state_dir) / "downloads.log", "a") as f:
                f.write(filename + "\n")


def downloads(faults: Faults) -> list[str]:
    path = Path(faults.state_dir) / "downloads.log"
    return path.read_text().splitlines() if path.exists() else []


class FaultyFileSystem(LocalFileSystem):
    """fsspec's local filesystem whose file reads fail as `faults` says."""

    def __init__(self, faults: Faults, **kwargs):
        super().__init__(**kwargs)
        self.faults = faults

    def get_file(self, path1, path2, callback=None, **kwargs):
        name = str(path1)
        if self.faults.transient or self.faults.permanent:
            self._fail(name)
        return super().get_file(path1, path2, callback=callback, **kwargs)

    def _fail(self, name: str) -> None:
        attempt = self.faults._count(name)
        if self.faults.permanent and fnmatch.fnmatchcase(name, self.faults.permanent):
            raise PermissionError(13, "Permission denied", name)
        if fnmatch.fnmatchcase(name, self.faults.pattern) and attempt < self.faults.transient:
            raise (ConnectionResetError if attempt % 2 else TimeoutError)(
                f"injected fault reading {name}"
            )


def serve_locally(monkeypatch, url: str, root: str | os.PathLike) -> str:
    """Makes `url` (e.g. "s3://local/ds") read the directory `root` through fsspec's real
    local filesystem: the one thing faked is the network (no server, no process); the
    object store, offset index, verification, cache and lookahead run as over S3."""
    from jaxload.storage import object_store, transport

    def filesystem(address, storage_options=None, timeout_s=None):
        assert address.rstrip("/") == url.rstrip("/"), address
        return LocalFileSystem(), str(root)

    monkeypatch.setattr(transport, "filesystem", filesystem)
    monkeypatch.setattr(object_store, "filesystem", filesystem)
    return url
