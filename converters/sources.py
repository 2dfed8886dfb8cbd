"""From the SRC a user types to a source reader: where the files are, which layout.

SRC is one of
  - a local directory (`data/pusht`),
  - an fsspec URL (`gs://bucket/pusht`, `s3://...`, `hf://datasets/lerobot/pusht`,
    `file:///abs/path`),
  - a Hugging Face Hub dataset id (`lerobot/pusht`, with an optional revision) when no
    local directory of that name exists.
The layout is read from meta/info.json: codebase v3.0, or v2.1/v2.0.

Example::

    source = open_source("lerobot/pusht", revision="main", cache_dir="/tmp/cache")
    source.codebase_version, source.num_episodes      # ('v3.0', 206)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jaxload.converters import lerobot_v3, lerobot_v21
from jaxload.converters.files import Files, FsspecFiles, LocalFiles
from jaxload.converters.hub import REPO_ID, HubClient, HubFiles
from jaxload.converters.lerobot_common import LeRobotSource, load_info
from jaxload.converters.remote import MISSING, TRANSIENT, RemoteError, RetryPolicy
from jaxload.errors import JaxloadError, SourceError

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
) -> Files:
    """The files behind SRC (see the module docstring for the forms SRC takes).

    `hub_client` replaces huggingface_hub (tests stand a local directory in for the hub);
    `filesystem` is an fsspec filesystem to use for a URL instead of building one.
    """
    text = os.fspath(src)
    is_url = "://" in text
    if revision is not None and (is_url or Path(text).exists()):
        raise JaxloadError(f"--revision {revision!r}: only a hub dataset id takes a revision")
    if is_url:
        return FsspecFiles(text, cache_dir=cache_dir, policy=policy, fs=filesystem)
    if Path(text).exists() or not REPO_ID.fullmatch(text):
        return LocalFiles(text)
    return HubFiles(text, revision=revision, cache_dir=cache_dir, policy=policy, client=hub_client)


def open_source(files: Files) -> LeRobotSource:
    """The reader for the dataset's codebase version."""
    if isinstance(files, HubFiles):
        _check_hub_repo(files)
    info = load_info(files)
    version = info.get("codebase_version")
    reader = READERS.get(version)
    if reader is None:
        raise SourceError(
            f"{files.describe('meta/info.json')}: codebase_version {version!r} is not "
            f"supported (supported: {', '.join(sorted(READERS))})"
        )
    return reader(files)


def _check_hub_repo(files: HubFiles) -> None:
    """The first hub request: its failures get messages that say what SRC was taken for."""
    try:
        files.listing()
    except RemoteError as e:
        if e.kind == MISSING:
            raise SourceError(
                f"{files.repo_id}: no local directory of that name, and no dataset "
                f"{files.repo_id!r} at revision {files.revision!r} on the hub ({e})"
            ) from e
        if e.kind == TRANSIENT:
            raise SourceError(
                f"{e}; cannot reach the Hugging Face Hub at {files.client.endpoint} "
                "(check the network and HF_ENDPOINT, or convert a local copy)"
            ) from e
        raise
