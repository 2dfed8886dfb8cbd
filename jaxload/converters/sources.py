"""From the SRC a user types to a source reader: where the files are, which layout.

SRC is one of
  - a local directory (`data/pusht`),
  - an fsspec URL (`gs://bucket/pusht`, `s3://...`, `hf://datasets/lerobot/pusht`,
    `file:///abs/path`),
  - a Hugging Face Hub dataset id (`lerobot/pusht`, with an optional revision) when no
    local directory of that name exists.
The layout is read from meta/info.json: codebase v3.0, or v2.1/v2.0.

A SRC that is neither gets one message saying what was tried: "no such local directory",
and either why it is no hub id (`./x`, `a/b/c`, `~/x`: never sent to the hub) or what the
hub said. That first hub request fails at once when the hub cannot be reached (offline
mode, a refused connection, an unknown host) instead of retrying: a mistyped local path
must not wait out 13 s of backoff. Later reads retry as usual (jaxload/storage/retry.py).

Example::

    source = open_source("lerobot/pusht", revision="main", cache_dir="/tmp/cache")
    source.codebase_version, source.num_episodes      # ('v3.0', 206)
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from jaxload.converters import lerobot_v3, lerobot_v21
from jaxload.converters.files import Files, FsspecFiles, LocalFiles
from jaxload.converters.hub import HubClient, HubFiles, is_repo_id
from jaxload.converters.lerobot_common import LeRobotSource, load_info
from jaxload.errors import JaxloadError, SourceError
from jaxload.storage.retry import (
    AUTH,
    MISSING,
    OFFLINE,
    TRANSIENT,
    UNREACHABLE,
    RemoteError,
    RetryPolicy,
    describe,
)

READERS: dict[str, type[LeRobotSource]] = {
    **{v: lerobot_v3.LeRobotV3Source for v in lerobot_v3.SUPPORTED_VERSIONS},
    **{v: lerobot_v21.LeRobotV21Source for v in lerobot_v21.SUPPORTED_VERSIONS},
}


def open_files(
    src: str | os.PathLike,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    policy: RetryPolicy | None = None,
    hub_client: HubClient | None = None,
    filesystem: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> Files:
    """The files behind SRC (see the module docstring for the forms SRC takes). A hub id
    costs its first request here (the commit and the file list), so a SRC that is neither
    a local directory nor a hub dataset fails here, with one message.

    `hub_client` replaces huggingface_hub (tests stand a local directory in for the hub);
    `filesystem` is an fsspec filesystem to use for a URL instead of building one, and
    `storage_options` configure the one built (endpoint, credentials).
    """
    text = os.fspath(src)
    is_url = "://" in text
    if revision is not None and (is_url or Path(text).exists()):
        raise JaxloadError(f"--revision {revision!r}: only a hub dataset id takes a revision")
    if is_url:
        return FsspecFiles(
            text,
            cache_dir=cache_dir,
            policy=policy,
            fs=filesystem,
            storage_options=storage_options,
        )
    if Path(text).exists():
        return LocalFiles(text)
    if not is_repo_id(text):
        raise SourceError(
            f"{text}: no such local directory (and not a Hugging Face dataset id either: "
            f"those have the form owner/name){_near_miss(text)}"
        )
    files = HubFiles(text, revision=revision, cache_dir=cache_dir, policy=policy, client=hub_client)
    _check_hub_repo(files)
    return files


def open_source(files: Files) -> LeRobotSource:
    """The reader for the dataset's codebase version."""
    if isinstance(files, HubFiles):
        _check_hub_repo(files)
    return reader_for(files, load_info(files))(files)


def reader_for(files: Files, info: dict[str, Any]) -> type[LeRobotSource]:
    """The reader class for info.json's codebase_version (`info`, read from `files`), or a
    SourceError naming that file and the versions supported.

    Example::

        reader_for(files, load_info(files))      # LeRobotV3Source for "v3.0"
    """
    version = info.get("codebase_version")
    reader = READERS.get(version)
    if reader is None:
        raise SourceError(
            f"{files.describe('meta/info.json')}: codebase_version {version!r} is not "
            f"supported (supported: {', '.join(sorted(READERS))})"
        )
    return reader


def _check_hub_repo(files: HubFiles) -> None:
    """The first hub request; when it fails, one message says both what SRC was tried as
    (a local directory, then a hub dataset) and what the hub said."""
    try:
        files.resolve()
    except RemoteError as e:
        raise SourceError(_not_found(files, e) + _near_miss(files.repo_id)) from e


def _not_found(files: HubFiles, e: RemoteError) -> str:
    repo, endpoint = files.repo_id, files.client.endpoint
    at = f" at revision {files.revision!r}" if files.revision != "main" else ""
    cause = describe(e.__cause__ or e)
    head = f"{repo}: no such local directory, and"
    if e.kind == MISSING:
        return f"{head} no Hugging Face dataset {repo!r}{at} (asked {endpoint}: {cause})"
    if e.kind == AUTH:
        return (
            f"{head} the Hugging Face dataset {repo!r}{at} is private, gated or does not exist "
            f"(asked {endpoint}: {cause}); for a private or gated dataset log in with "
            "`hf auth login` or set HF_TOKEN"
        )
    if e.kind == OFFLINE:
        return f"{head} HF_HUB_OFFLINE is set, so the Hugging Face Hub was not asked for {repo!r}"
    if e.kind == UNREACHABLE:
        return (
            f"{head} cannot reach the Hugging Face Hub at {endpoint} to look for a dataset "
            f"{repo!r} ({cause}); check the network and HF_ENDPOINT"
        )
    if e.kind == TRANSIENT:
        return f"{head} the Hugging Face Hub at {endpoint} did not answer for {repo!r}: {e}"
    return f"{head} looking up the Hugging Face dataset {repo!r}{at} failed: {e}"


def _near_miss(text: str) -> str:
    """ "; did you mean DIR?" when the parent exists and holds a similarly named directory."""
    path = Path(text)
    if not path.parent.is_dir():
        return ""
    try:
        names = [p.name for p in path.parent.iterdir() if p.is_dir()]
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.75)
    return f"; did you mean {path.parent / close[0]}?" if close else ""
