"""A remote dataset as the format reader's objects: `DatasetFiles` whose metadata comes
from a local copy of the dataset's `meta/` (a few small files, fetched at open) and whose
shard reads go to a `RemoteStore` (byte ranges, verified, cached).

    files = open_files("s3://bucket/ds", storage_options={"anon": True})
    files.info.fps, len(files.episodes)
    files.readers.read(0, [17, 18])      # verified payloads, as ShardReaders.read
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import contextlib
import dataclasses
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from jaxload.errors import DatasetError
from jaxload.format import layout
from jaxload.format.layout import read_info
from jaxload.format.reader import DatasetFiles, ShardReaders, read_episodes
from jaxload.storage.remote import RemoteOptions, RemoteStore
from jaxload.storage.retry import MISSING, RemoteError, call_with_retries
from jaxload.storage.scratch import owned_directory, remove_owned
from jaxload.storage.urls import filesystem, is_url, join

# meta/ files a reader needs (stats and speed buckets are optional).
REQUIRED_META = (layout.INFO_PATH, layout.EPISODES_PATH, layout.TASKS_PATH)


class RemoteShardReaders(ShardReaders):
    """`ShardReaders` over a `RemoteStore`: same interface, reads by byte range."""

    def __init__(self, url: str, info: layout.DatasetInfo, store: RemoteStore, describe=None):
        self.root, self.info, self.store, self.describe = url, info, store, describe
        self._local = threading.local()

    def path(self, shard: int) -> str:
        return join(self.root, layout.shard_path(shard))

    def get(self, shard: int) -> Any:
        raise NotImplementedError("remote shards are read by byte range, not opened")

    def read(self, shard: int, records: Sequence[int]) -> list[bytes]:
        return self.store.read(int(shard), [int(r) for r in records])

    def close(self) -> None:
        """Nothing to close per thread (the store's fetch threads outlive reads)."""

    def __getstate__(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "info": self.info,
            "store": self.store,
            "describe": self.describe,
        }


def open_files(
    path: str | os.PathLike,
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote: RemoteOptions | Mapping[str, Any] | None = None,
    meta_root: str | None = None,
) -> DatasetFiles:
    """`DatasetFiles` of a local dataset, or of one at a URL (s3://, gs://, hf://, https://).

    For a URL, `files.root` is a local copy of its meta/ (what metadata readers open;
    `meta_root` when the caller made it already, with `mirror_meta`) and `files.url` the
    URL."""
    if not is_url(path):
        return DatasetFiles(path)
    url = str(path).rstrip("/")
    meta_root = meta_root or mirror_meta(url, storage_options)
    files = DatasetFiles.__new__(DatasetFiles)
    files.root = meta_root
    files.url = url
    with named_as(meta_root, url):
        files.info = read_info(meta_root)
        episodes = read_episodes(meta_root, files.info)
    files.episodes = dataclasses.replace(episodes, root=url)
    store = RemoteStore(url, files.info, remote, storage_options, files.episodes.locate)
    files.readers = RemoteShardReaders(url, files.info, store, files.episodes.locate)
    return files


def read_meta_file(url: str, relative: str, storage_options: Mapping[str, Any] | None) -> bytes:
    """One metadata file of the dataset at `url`, with retries; fails fast naming it."""
    fs, root = filesystem(url, storage_options)
    return call_with_retries(
        lambda: fs.cat_file(join(root, relative)),
        what=join(url, relative),
        policy=RemoteOptions().retry,
        missing=f"is {url} a jaxload dataset (`jaxload convert SRC {url}`)?",
    )


def mirror_meta(url: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """A local temporary directory holding the dataset's meta/ files (removed at exit)."""
    fs, root = filesystem(url, storage_options)
    policy = RemoteOptions().retry  # as read_meta_file's
    info = read_meta_file(url, layout.INFO_PATH, storage_options)  # fails fast when absent
    _refuse_lerobot(url, info)
    try:
        listed = call_with_retries(
            lambda: fs.ls(join(root, "meta"), detail=True), what=join(url, "meta"), policy=policy
        )
    except RemoteError as e:
        if e.kind != MISSING:
            raise
        listed = []
    # Files only: a "directory" (a common prefix) cannot be fetched.
    names = {
        os.path.basename(str(entry["name"]).rstrip("/"))
        for entry in listed
        if entry.get("type", "file") == "file"
    } | {os.path.basename(p) for p in REQUIRED_META}
    local = owned_directory("jaxload-meta")  # removed at exit, or by a later process
    atexit.register(remove_owned, local)
    os.makedirs(os.path.join(local, "meta"))
    relatives = [f"meta/{name}" for name in sorted(names)]
    # Concurrently: at 50 ms per request, one after the other they cost 0.2 s of the time
    # to the first batch.
    with cf.ThreadPoolExecutor(8, thread_name_prefix="jaxload-meta") as pool:
        contents = pool.map(
            lambda relative: (
                info
                if relative == layout.INFO_PATH
                else read_meta_file(url, relative, storage_options)
            ),
            relatives,
        )
        for relative, data in zip(relatives, contents, strict=True):
            with open(os.path.join(local, relative), "wb") as f:
                f.write(data)
    return local


def _refuse_lerobot(url: str, info: bytes) -> None:
    """A LeRobot dataset at `url` is said to be one (as `read_info` says of a local one),
    before its meta/episodes/ is taken for jaxload metadata files."""
    try:
        raw = json.loads(info)
    except ValueError:
        return  # read_info names the unreadable file
    lerobot = isinstance(raw, dict) and "codebase_version" in raw
    if lerobot and raw.get("format") != layout.FORMAT_NAME:
        raise DatasetError(
            f"{url} is a LeRobot dataset ({raw['codebase_version']}), not a jaxload "
            f"dataset: convert it first with `jaxload convert {url} OUT`"
        )


@contextlib.contextmanager
def named_as(local: str, url: str) -> Iterator[None]:
    """DatasetErrors raised while reading the local copy of a URL's meta/ name the URL, not
    the temporary directory (which is gone when the user reads the message)."""
    try:
        yield
    except DatasetError as e:
        text = str(e)
        if local not in text:
            raise
        raise type(e)(text.replace(local, url)) from e
