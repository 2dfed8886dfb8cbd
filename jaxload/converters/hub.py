"""A dataset on the Hugging Face Hub, fetched file by file through `huggingface_hub`.

One metadata request resolves the revision to a commit and lists the repository's files
with their sizes; every later download names that commit, so a conversion (and its
resume after a crash) reads one consistent snapshot even when the branch moves. Files
are fetched on demand with `hf_hub_download` into a cache directory and retried under
the `RetryPolicy` of `jaxload/storage/retry.py`.

The network sits behind the small `HubClient` protocol so tests can stand a local
directory in for the hub (there is no network where the tests run).

Example::

    files = HubFiles("lerobot/pusht", revision="main", cache_dir="/tmp/hf")
    files.local("meta/info.json")
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Protocol

from jaxload.converters.files import CachedRemoteFiles
from jaxload.storage.retry import RetryPolicy, call_with_retries

# owner/name as the hub spells repository ids: each part starts and ends with a letter,
# digit or `_` (huggingface_hub's validate_repo_id).
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
REPO_ID = re.compile(f"{_PART}/{_PART}")
MAX_NAME_LENGTH = 96


def is_repo_id(text: str) -> bool:
    """Whether `text` can be a hub dataset id: `owner/name`, one slash, letters, digits and
    `-_.`, no `--` or `..`, not ending in `.git`, the name at most 96 characters (the hub's
    own rules). A path such as `./x`, `../x`, `/x`, `~/x` or `a/b/c` never is."""
    return (
        REPO_ID.fullmatch(text) is not None
        and "--" not in text
        and ".." not in text
        and not text.endswith(".git")
        and len(text.partition("/")[2]) <= MAX_NAME_LENGTH
    )


class HubClient(Protocol):
    """The three hub operations the converter needs."""

    endpoint: str  # where it connects, for messages

    def repo_files(self, repo_id: str, revision: str | None) -> tuple[str, dict[str, int]]:
        """(commit sha of `revision`, {path: size} of every file at that commit)."""
        ...

    def download(self, repo_id: str, filename: str, revision: str, cache_dir: str) -> str:
        """Local path of the file at `revision`, downloaded into cache_dir if need be."""
        ...

    def cached_path(self, repo_id: str, filename: str, revision: str, cache_dir: str) -> str | None:
        """Where the file sits in cache_dir, or None when it is not there."""
        ...


class HfHubClient:
    """`HubClient` over huggingface_hub (honours HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE)."""

    def __init__(self, token: str | None = None, timeout: float = 30.0):
        self.token = token
        self.timeout = timeout

    @property
    def endpoint(self) -> str:
        from huggingface_hub import constants

        return constants.ENDPOINT

    def repo_files(self, repo_id: str, revision: str | None) -> tuple[str, dict[str, int]]:
        from huggingface_hub import HfApi

        info = HfApi(token=self.token).dataset_info(
            repo_id, revision=revision, files_metadata=True, timeout=self.timeout
        )
        return info.sha, {s.rfilename: int(s.size or 0) for s in info.siblings}

    def download(self, repo_id: str, filename: str, revision: str, cache_dir: str) -> str:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()  # one bar per file from every worker: the converter has its own
        return hf_hub_download(
            repo_id,
            filename,
            repo_type="dataset",
            revision=revision,
            cache_dir=cache_dir,
            token=self.token,
        )

    def cached_path(self, repo_id: str, filename: str, revision: str, cache_dir: str) -> str | None:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(
            repo_id, filename, cache_dir=cache_dir, revision=revision, repo_type="dataset"
        )
        return path if isinstance(path, str) else None


class HubFiles(CachedRemoteFiles):
    """The files of hub dataset `repo_id` at `revision` (a branch, tag or commit)."""

    def __init__(
        self,
        repo_id: str,
        *,
        revision: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        policy: RetryPolicy | None = None,
        client: HubClient | None = None,
    ):
        super().__init__(cache_dir, policy or RetryPolicy())
        self.repo_id = repo_id
        self.revision = revision or "main"
        self.client = client or HfHubClient()
        self.sha: str | None = None

    def describe(self, rel: str) -> str:
        base = f"hf://datasets/{self.repo_id}@{self.revision}"
        return f"{base}/{rel}" if rel else base

    def resolve(self) -> None:
        """The first request (the commit and file list). It decides whether SRC names a hub
        dataset at all, so it fails at once, without retries, when the hub cannot be
        reached: a mistyped local path should not wait out a backoff. Once the hub has
        answered, later reads retry transient errors under the policy as usual."""
        if self._listing is None:
            self._listing = call_with_retries(
                self._fetch_listing,
                what=self.describe(""),
                policy=self.policy,
                counter=self.counter,
                fail_fast_unreachable=True,
            )

    def identity(self) -> dict[str, Any]:
        self.listing()  # resolves the commit
        return {"kind": "hub", "location": self.repo_id, "revision": self.sha}

    def _fetch_listing(self) -> dict[str, int]:
        self.sha, files = self.client.repo_files(self.repo_id, self.revision)
        return files

    def _download(self, rel: str) -> Path:
        path = self.client.download(self.repo_id, rel, self.sha, str(self.cache_dir))
        return Path(path)

    def evict(self, rel: str) -> None:
        if self.cache_dir is None or self.sha is None:
            return
        link = self.client.cached_path(self.repo_id, rel, self.sha, str(self.cache_dir))
        if link is None:
            return
        blob = os.path.realpath(link)  # the hub cache links snapshots/<sha>/<rel> to a blob
        Path(link).unlink(missing_ok=True)
        if blob != link:
            Path(blob).unlink(missing_ok=True)
