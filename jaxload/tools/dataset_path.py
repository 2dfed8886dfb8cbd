"""The PATH of `jaxload info`, `stats` and `doctor`: a local directory, a hub dataset id or
a URL, with the fsspec storage options of `--storage-option KEY=VALUE` (shared with
`jaxload convert`).

A URL of a scheme the loader reads (s3://, gs://, hf://, http(s)://) is looked at through
its meta/info.json alone: a jaxload dataset there is described from its metadata read
where it lives (`locate`), exactly as `jaxload.open(url, storage_options=...)` reads it; a
LeRobot dataset there goes to the source commands. Every failure is a JaxloadError that
names the URL (a missing bucket, a missing meta/info.json, access denied).

    options = storage_options_of(args)                # {"endpoint_url": ...} or None
    dataset_kind(args.path, options)                  # "jaxload" or "lerobot"
    where = locate("s3://bucket/ds", options)         # where.storage: read where it lives
    info = read_info(where.storage)                   # errors name s3://bucket/ds
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jaxload.errors import DatasetError, JaxloadError
from jaxload.format import layout
from jaxload.format.storage import DatasetStorage
from jaxload.storage.retry import RetryPolicy
from jaxload.storage.urls import is_url

JAXLOAD = "jaxload"
LEROBOT = "lerobot"
# A metadata read by the CLI: a few quick tries, so a dead endpoint fails in seconds.
CLI_RETRY = {"attempts": 4, "base_delay": 0.2, "max_delay": 2.0}


def add_storage_option(parser: argparse.ArgumentParser, applies_to: str) -> None:
    """The repeatable `--storage-option KEY=VALUE` flag (into `args.storage_option`)."""
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        type=storage_option,
        metavar="KEY=VALUE",
        help=f"{applies_to}: an fsspec storage option, repeatable (VALUE parsed as JSON when "
        "it is JSON, e.g. endpoint_url=http://localhost:9000 or anon=false); default: "
        "fsspec's environment and configuration",
    )


def storage_option(pair: str) -> tuple[str, Any]:
    """One KEY=VALUE as (key, value): VALUE as JSON when it parses (numbers, booleans,
    objects such as client_kwargs={...}), else the string. An argparse `type`, so a
    malformed pair is a usage error (exit status 2) naming the flag."""
    key, sep, value = pair.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{pair!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def storage_options_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """The parsed `--storage-option`s as fsspec keyword arguments, or None."""
    return dict(args.storage_option) or None


def refuse_options_for_local(path: str, options: Mapping[str, Any] | None) -> None:
    """Storage options configure a URL's filesystem; given with anything else they would be
    silently ignored, so they are refused."""
    if options and "://" not in str(path):
        raise JaxloadError(
            f"{path}: --storage-option applies only to a URL (s3://, gs://, hf://, https://)"
        )


def dataset_kind(path: str | os.PathLike, options: Mapping[str, Any] | None = None) -> str:
    """JAXLOAD or LEROBOT: what `path` holds, judged by its meta/info.json. Anything that
    is not a jaxload dataset is left to the LeRobot source reader (a local directory, a
    hub id, any fsspec URL), which says what is wrong with it; a URL of a loader scheme
    without a meta/info.json is an error here, naming it."""
    from jaxload.tools.doctor import is_jaxload_dataset

    if not is_url(path):
        return JAXLOAD if is_jaxload_dataset(path) else LEROBOT
    raw = manifest(str(path), options)
    return JAXLOAD if raw.get("format") == layout.FORMAT_NAME else LEROBOT


def manifest(url: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """meta/info.json at `url`, parsed; a JaxloadError naming the URL when it is not there
    (a missing bucket is said as such), unreadable or not a dataset's."""
    from jaxload.storage.retry import call_with_retries
    from jaxload.storage.urls import filesystem, join

    url = url.rstrip("/")
    fs, root = filesystem(url, options)
    where = join(url, layout.INFO_PATH)
    data = call_with_retries(
        lambda: fs.cat_file(join(root, layout.INFO_PATH)),
        what=where,
        policy=RetryPolicy(**CLI_RETRY),
        missing=f"no jaxload or LeRobot dataset at {url}; is the URL right?",
    )
    try:
        raw = json.loads(data)
    except ValueError as e:
        raise DatasetError(f"{where}: not valid JSON ({e})") from e
    if not isinstance(raw, dict) or ("format" not in raw and "codebase_version" not in raw):
        raise DatasetError(f"{where}: neither a jaxload nor a LeRobot dataset's info.json")
    return raw


@dataclasses.dataclass(frozen=True)
class Located:
    """A jaxload dataset as the CLI reads it: `storage` reads its files where they live
    (a local directory, or an object store for a URL)."""

    path: str  # as given: what messages name
    storage: DatasetStorage
    url: str | None = None
    storage_options: Mapping[str, Any] | None = None

    def total_bytes(self) -> int:
        """Bytes of every file (every object under the URL's prefix)."""
        if self.url is None:
            root = Path(self.storage.name)
            return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        from jaxload.storage.retry import RetryPolicy, call_with_retries
        from jaxload.storage.urls import filesystem

        fs, root = filesystem(self.url, self.storage_options)
        return int(
            call_with_retries(
                lambda: fs.du(root, total=True), what=self.url, policy=RetryPolicy(**CLI_RETRY)
            )
        )


def locate(path: str | os.PathLike, options: Mapping[str, Any] | None = None) -> Located:
    """A jaxload dataset's `Located`. A LeRobot dataset at a URL is refused with the
    message `read_info` gives for a local one."""
    from jaxload.storage.object_store import open_storage

    refuse_options_for_local(str(path), options)
    if not is_url(path):
        return Located(os.fspath(path), open_storage(path))
    url = str(path).rstrip("/")
    manifest(url, options)  # one request that says what is there (or is not)
    remote = {"retry": RetryPolicy(**CLI_RETRY)}
    return Located(
        str(path), open_storage(url, storage_options=options, remote=remote), url, options
    )
