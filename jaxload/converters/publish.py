"""Publishing a converted dataset to object storage: `jaxload convert SRC s3://bucket/ds`.

A URL OUT (s3://, gs://, hf://: `jaxload.storage.urls.is_url`) is converted exactly like a
local one, into a local staging directory (`staging_dir`: `WORK_DIR/<name>-<hash of the
URL>`, its partial state beside it as usual), then uploaded:

1. every file but `meta/info.json`, several at a time, each checked after its upload (the
   object's size; the remote reader verifies the content by xxh3 anyway);
2. `meta/info.json` last. It is the manifest: a prefix without it is not a dataset to any
   reader, so an interrupted upload is never visible as a (half) dataset.

A destination that holds anything (a dataset, or any object under the prefix) is refused
before anything is converted or written, unless it is this conversion's own interrupted
upload: `upload.json` in the partial directory records the URL and fingerprint before the
first object is written. A rerun of the same command then uploads what is missing (objects
already there with the right size are kept) and finishes. After success the staging copy is
removed (kept with `keep_local`), then the partial directory.

Every call to the store goes through `jaxload.storage.retry.call_with_retries`: transient
errors (timeouts, dropped connections, 429, 5xx) are retried with backoff, anything else
fails at once with the object's URL in the message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from tqdm import tqdm

from jaxload import format as fmt
from jaxload.converters.partial import JobState, crash_point, read_json, write_json_durable
from jaxload.converters.progress import ConvertReport
from jaxload.errors import JaxloadError
from jaxload.storage.retry import (
    AUTH,
    MISSING,
    RemoteError,
    RetryCounter,
    RetryPolicy,
    call_with_retries,
    describe,
    no_credentials,
)
from jaxload.storage.urls import filesystem, is_url, join

UPLOAD_RECORD = "upload.json"  # in the partial directory: our objects at this URL
UPLOAD_THREADS = 8  # objects in flight: enough to hide per-request latency
BUCKET_SCHEMES = ("s3", "gs", "gcs")  # the first path component is a bucket
READ_ONLY_SCHEMES = ("http", "https")
INFO = fmt.INFO_PATH


class PublishError(JaxloadError):
    """The destination cannot take the dataset (not empty, not writable, upload failed)."""


class UploadSizeMismatch(ConnectionError):
    """An object's size after its upload differs from the file's: a transfer cut short that
    the store accepted. A ConnectionError, so the retry policy uploads it again."""


def default_work_dir() -> Path:
    """`$XDG_CACHE_HOME/jaxload/convert` (default `~/.cache/jaxload/convert`)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "jaxload" / "convert"


def staging_dir(url: str, work_dir: str | os.PathLike | None = None) -> Path:
    """The local directory a URL OUT is converted into before its upload: a pure function
    of the URL (and the work dir), so a rerun of the same command finds its state."""
    url = url.rstrip("/")
    name = url.partition("://")[2].rstrip("/").rpartition("/")[2] or "dataset"
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    root = Path(work_dir) if work_dir is not None else default_work_dir()
    return root / f"{name}-{digest}"


def resolve_out(
    out: str | os.PathLike,
    work_dir: str | os.PathLike | None,
    keep_local: bool,
    storage_options: Mapping[str, Any] | None,
    policy: RetryPolicy | None,
) -> tuple[Destination | None, Path]:
    """(the Destination of a URL OUT or None, the local directory to convert into)."""
    if is_url(out):
        target = Destination(str(out), storage_options, policy)
        return target, staging_dir(target.url, work_dir)
    if work_dir is not None or keep_local or storage_options:
        raise JaxloadError(
            f"{out}: --work-dir, --keep-local and --storage-option apply only to a URL OUT"
        )
    return None, Path(out)


def finish_output(
    target: Destination | None,
    state: JobState,
    out: Path,
    keep_local: bool,
    progress: bool,
    report: ConvertReport,
) -> ConvertReport:
    """OUT is complete locally: uploaded when it stands for a URL, then the state goes."""
    if target is not None:
        report = target.publish(state, out, report, keep_local=keep_local, progress=progress)
    state.remove()
    return report


@dataclasses.dataclass
class Uploaded:
    files: int  # uploaded by this run
    bytes: int
    skipped: int  # already there with the right size (an interrupted upload's)
    seconds: float


class Destination:
    """A URL OUT: its filesystem, the emptiness checks, the upload."""

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        policy: RetryPolicy | None = None,
    ):
        self.url = url.rstrip("/")
        scheme = self.url.partition("://")[0].lower()
        if scheme in READ_ONLY_SCHEMES:
            raise PublishError(
                f"{self.url}: {scheme}:// is read-only; write to s3://, gs:// or hf:// (or a "
                "local directory) and serve the dataset from there"
            )
        self.scheme = scheme
        self.fs, self.root = filesystem(self.url, storage_options)
        self.policy = policy or RetryPolicy()
        self.counter = RetryCounter()
        self._bar_lock = threading.Lock()

    def _call(self, fn, what: str):
        try:
            return call_with_retries(fn, what=what, policy=self.policy, counter=self.counter)
        except RemoteError as e:
            if e.kind == AUTH:  # retry.py's hint is about the hub: say what applies here
                cause = describe(e.__cause__ if e.__cause__ is not None else e)
                said = "no credentials found" if no_credentials(e) else "access denied"
                raise PublishError(
                    f"{what}: {said} ({cause}); check that the credentials (from the "
                    "environment, fsspec's configuration or --storage-option) may list and "
                    f"write {self.url}"
                ) from e
            raise PublishError(str(e)) from e

    # --- what is there ----------------------------------------------------------------

    def listing(self) -> dict[str, int]:
        """{path relative to the prefix: size} of every object under it."""
        self.fs.invalidate_cache()  # another writer (or an earlier run) may have changed it
        if self.scheme in BUCKET_SCHEMES:
            bucket = self.root.split("/")[0]
            where = f"{self.scheme}://{bucket}"
            if not self._call(lambda: self.fs.exists(bucket), where):
                # exists() is False for any failure, missing credentials included: a listing
                # raises the reason, which is said instead where it is not a missing bucket.
                try:
                    self._call(lambda: self.fs.ls(bucket), where)
                except PublishError as e:
                    if not (isinstance(e.__cause__, RemoteError) and e.__cause__.kind == MISSING):
                        raise
                raise PublishError(
                    f"{self.url}: bucket {bucket!r} does not exist (or these credentials "
                    "cannot see it); create it first. Nothing was written"
                )
        try:
            found = self._call(lambda: self.fs.find(self.root, detail=True), self.url)
        except PublishError as e:
            if isinstance(e.__cause__, RemoteError) and e.__cause__.kind == MISSING:
                return {}  # nothing under the prefix yet
            raise
        objects = {}
        prefix = self.root.rstrip("/") + "/"
        for path, entry in found.items():
            if path.rstrip("/") == self.root:
                raise PublishError(
                    f"{self.url}: is an object, not a prefix; refusing to replace it"
                )
            size = int(entry.get("size") or 0)
            if entry.get("type") == "directory" or (path.endswith("/") and size == 0):
                continue  # a "folder" marker: nothing a dataset could lose
            relative = path[len(prefix) :] if path.startswith(prefix) else Path(path).name
            objects[relative] = size
        return objects

    def ours(self, partial: Path) -> dict[str, Any] | None:
        """The upload record of an earlier run of this conversion to this URL, if any."""
        record = read_json(Path(partial) / UPLOAD_RECORD)
        return record if record is not None and record.get("url") == self.url else None

    def refuse_unless_ours(self, partial: Path) -> None:
        """Refuses a destination holding anything but this conversion's interrupted
        upload (called before anything is converted or written)."""
        objects = self.listing()
        if objects and self.ours(partial) is None:
            raise self._taken(objects)

    def _taken(self, objects: Mapping[str, int]) -> PublishError:
        if INFO in objects:
            return PublishError(
                f"{self.url}: already holds a jaxload dataset ({join(self.url, INFO)}); "
                "refusing to overwrite it (nothing was written there). Choose another destination, "
                "or delete that one first"
            )
        first = join(self.url, sorted(objects)[0])
        return PublishError(
            f"{self.url}: already holds {len(objects)} object(s) (e.g. {first}); refusing to "
            "write into a prefix that is not empty (nothing was written there). Choose another "
            "destination, or delete them first"
        )

    def finished(
        self, state: JobState, local: Path, started: float, *, keep_local: bool
    ) -> ConvertReport | None:
        """When this conversion's upload had completed (a run died while cleaning up): the
        cleanup done, the report; None otherwise."""
        record = self.ours(state.root)
        if not record or not record.get("complete"):
            return None
        if record.get("fingerprint") != state.published_fingerprint():
            return None
        report = ConvertReport(
            out=local,
            episodes=record["episodes"],
            frames=record["frames"],
            seconds=time.perf_counter() - started,
            source_bytes=0,
            earlier=True,
            output_bytes=record["bytes"],
            psnr={},
        )
        return self.cleaned_up(local, report, None, keep_local=keep_local)

    # --- the upload -------------------------------------------------------------------------

    def upload(self, local: Path, partial: Path, *, progress: bool) -> Uploaded:
        """Uploads the finished dataset at `local`: info.json last (module docstring)."""
        started = time.perf_counter()
        files = {
            p.relative_to(local).as_posix(): p.stat().st_size
            for p in sorted(local.rglob("*"))
            if p.is_file()
        }
        info = (local / INFO).read_bytes()
        described = json.loads(info)
        fingerprint = described["fingerprint"]
        record = self.ours(partial)
        if record is not None and record.get("fingerprint") != fingerprint:
            record = None  # another conversion's objects: never ours to overwrite
        remote = self.listing()
        if remote and record is None:
            raise self._taken(remote)
        self._check_leftovers(remote, files)
        if INFO in remote:  # same size: an earlier run got as far as the manifest
            if self._call(lambda: self.fs.cat_file(join(self.root, INFO)), self._url(INFO)) == info:
                return Uploaded(0, 0, len(files), time.perf_counter() - started)
            raise PublishError(
                f"{self._url(INFO)}: differs from this conversion's; refusing to overwrite it"
            )
        if record is None:  # before the first object: from now on they are ours
            write_json_durable(
                partial / UPLOAD_RECORD, {"url": self.url, "fingerprint": fingerprint}
            )
        todo = [rel for rel in files if rel != INFO and rel not in remote]
        total = sum(files[rel] for rel in todo) + files[INFO]
        bar = tqdm(
            total=total,
            desc="upload",
            unit="B",
            unit_scale=True,
            disable=not progress,
            dynamic_ncols=True,
        )
        try:
            self._put_all(local, todo, files, bar)
            self._put(local, INFO, files[INFO], bar)  # the manifest, last
        finally:
            bar.close()
        complete = {
            "url": self.url,
            "fingerprint": fingerprint,
            "complete": True,
            "episodes": described["total_episodes"],
            "frames": described["total_frames"],
            "bytes": sum(files.values()),
        }
        write_json_durable(partial / UPLOAD_RECORD, complete)
        crash_point("upload-complete")
        return Uploaded(
            len(todo) + 1, total, len(files) - len(todo) - 1, time.perf_counter() - started
        )

    def _check_leftovers(self, remote: Mapping[str, int], files: Mapping[str, int]) -> None:
        """Our interrupted upload's objects are kept; anything else is not ours to touch."""
        foreign = sorted(rel for rel in remote if rel not in files)
        wrong = sorted(rel for rel in remote if rel in files and remote[rel] != files[rel])
        if foreign or wrong:
            rel, count = (foreign or wrong)[0], len(foreign) + len(wrong)
            raise PublishError(
                f"{self.url}: holds {count} object(s) this conversion did not write (e.g. "
                f"{self._url(rel)}, {remote[rel]} bytes); refusing to write beside or over "
                "them. Delete them, or choose another destination"
            )

    def _put_all(self, local: Path, todo: list[str], files: Mapping[str, int], bar) -> None:
        if not todo:
            return
        with ThreadPoolExecutor(min(UPLOAD_THREADS, len(todo))) as pool:
            futures = [pool.submit(self._put, local, rel, files[rel], bar) for rel in todo]
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for future in pending:
                future.cancel()  # a failed upload ends the run: start no more
            for future in done:
                future.result()  # raises the first failure

    def _put(self, local: Path, rel: str, size: int, bar) -> None:
        rpath = join(self.root, rel)

        def attempt() -> None:
            self.fs.put_file(str(local / rel), rpath)
            self.fs.invalidate_cache(rpath)
            got = int(self.fs.info(rpath)["size"])
            if got != size:
                raise UploadSizeMismatch(f"uploaded {size} bytes, the store holds {got}")

        self._call(attempt, self._url(rel))
        with self._bar_lock:
            bar.update(size)
        crash_point("upload-file")

    def _url(self, rel: str) -> str:
        return join(self.url, rel)

    # --- the end ------------------------------------------------------------------------

    def publish(
        self,
        state: JobState,
        local: Path,
        report: ConvertReport,
        *,
        keep_local: bool,
        progress: bool,
    ) -> ConvertReport:
        """Uploads `local`, removes it unless `keep_local`; the report now names the URL."""
        uploaded = self.upload(local, state.root, progress=progress)
        return self.cleaned_up(local, report, uploaded, keep_local=keep_local)

    def cleaned_up(
        self,
        local: Path,
        report: ConvertReport,
        uploaded: Uploaded | None,
        *,
        keep_local: bool,
    ) -> ConvertReport:
        """After a complete upload: the staging copy goes (or stays), the report says so."""
        if not keep_local:
            shutil.rmtree(local, ignore_errors=True)
        where = f"local copy kept in {local}" if keep_local else "local staging copy removed"
        if uploaded is None:
            line = f"upload to {self.url} had completed; {where}"
        else:
            rate = uploaded.bytes / 2**20 / max(uploaded.seconds, 1e-9)
            line = (
                f"upload: {uploaded.files} objects, {uploaded.bytes / 2**20:.2f} MB to {self.url} "
                f"in {uploaded.seconds:.1f} s ({rate:.1f} MB/s), meta/info.json last"
                + (f"; {uploaded.skipped} already there (resumed)" if uploaded.skipped else "")
                + "; "
                + where
            )
        return dataclasses.replace(
            report,
            out=self.url,
            seconds=report.seconds + (uploaded.seconds if uploaded else 0.0),
            upload=line,
            retries=report.retries + self.counter.retries,
        )
