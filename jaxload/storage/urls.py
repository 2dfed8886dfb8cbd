"""Dataset URLs: which paths are remote, and the fsspec filesystem that reads them.

    is_url("s3://bucket/ds")              # True; also gs://, gcs://, hf://, http(s)://
    fs, root = filesystem("s3://bucket/ds", {"anon": True})
    fs.cat_file(join(root, "meta/info.json"))

Endpoints and credentials come the fsspec way: its configuration and environment (e.g.
`FSSPEC_S3_ENDPOINT_URL`, `FSSPEC_S3_KEY`, the AWS/GCS/HF environment variables and
credential files the clients read) or `storage_options`, passed to the filesystem as is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from jaxload.errors import DatasetError
from jaxload.storage.secrets import (
    SECRET_NAMES,
    guard_library_logs,
    redact_url_secrets,
    secret_values,
    split_userinfo,
)

SCHEMES = ("s3", "gs", "gcs", "hf", "http", "https")
# The package each scheme needs (the `remote` extra installs s3fs; the others on demand).
PACKAGES = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "hf": "huggingface_hub"}


def is_url(path: Any) -> bool:
    """Whether `path` names a remote dataset (a URL of a scheme fsspec reads)."""
    if not isinstance(path, str):
        return False
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def warn_if_unused(paths: Iterable[Any], storage_options: Any, remote: Any) -> None:
    """Warns when `storage_options` or `remote` were given but none of `paths` is a URL:
    they apply to URLs only, and a local read ignores them (e.g. a config written for a
    bucket, pointed at a local copy)."""
    given = [name for name, v in (("storage_options", storage_options), ("remote", remote)) if v]
    if given and not any(is_url(p) for p in paths):
        logging.getLogger("jaxload.storage").warning(
            "%s: %s apply to dataset URLs (s3://, gs://, hf://, https://) only; this local "
            "read ignores them",
            ", ".join(str(p) for p in paths),
            " and ".join(given),
        )


def join(root: str, relative: str) -> str:
    """`relative` (a layout path such as meta/info.json) under `root`."""
    return f"{root.rstrip('/')}/{relative}"


# Seconds a request may wait for a connection or for its next bytes before it counts as a
# transient failure (retried by jaxload's RetryPolicy). botocore waits 60 s, so a stalled
# endpoint held a read for minutes across the retries.
TIMEOUT_S = 10.0


def filesystem(
    url: str, storage_options: Mapping[str, Any] | None = None, timeout_s: float = TIMEOUT_S
) -> tuple[Any, str]:
    """(fsspec filesystem, path of the dataset root in it) for a dataset URL.

    Raises a DatasetError naming the package to install when fsspec or the scheme's
    implementation is missing."""
    try:
        import fsspec
        from fsspec.core import url_to_fs
    except ImportError as e:  # pragma: no cover - the remote extra installs it
        raise DatasetError(
            f"{redact(url)}: reading URLs needs fsspec: pip install 'jaxload[remote]'"
        ) from e
    del fsspec
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    url, userinfo = split_userinfo(scheme + sep + rest)  # fsspec knows "s3", not "S3"
    options = dict(storage_options or {})
    guard_library_logs([*secret_values(options), *(userinfo or ())[1:]])
    if userinfo is not None:  # never in a URL a library holds, logs or puts in an error
        if scheme not in ("http", "https"):
            raise DatasetError(
                f"{redact(url)}: credentials in a {scheme}:// URL are not read; give them in "
                "storage_options (or the store's environment and credential files)"
            )
        import base64

        basic = base64.b64encode(":".join(userinfo).encode()).decode()
        client = dict(options.get("client_kwargs") or {})
        client["headers"] = {"Authorization": f"Basic {basic}", **(client.get("headers") or {})}
        options["client_kwargs"] = client
    try:
        if scheme == "s3":
            options = _s3_defaults(options, timeout_s)
        fs, root = url_to_fs(url, **options)
    except ImportError as e:
        package = PACKAGES.get(scheme, "the fsspec implementation of " + scheme)
        raise DatasetError(f"{redact(url)}: reading {scheme}:// URLs needs {package} ({e})") from e
    if scheme == "s3" and hasattr(fs, "retries"):
        # s3fs loops 5 times (with backoff) around timeouts and SlowDown itself, under
        # jaxload's RetryPolicy: one try each. A class attribute, not an argument; this
        # instance is jaxload's own (fsspec caches instances by their arguments, and the
        # botocore config above is part of them).
        fs.retries = 1
    return fs, root.rstrip("/")


def _s3_defaults(options: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """botocore retries each request itself (5 tries, random backoff up to 8 s) under
    jaxload's RetryPolicy, which made a persistent HTTP 500 take 195 s to fail (25 s with
    this); so botocore's retries are off (max_attempts 0: no retry after the first try)
    unless the user configured them (fsspec config, storage_options, AWS_MAX_ATTEMPTS);
    likewise s3fs's own (see `filesystem`). Its connect and read timeouts are `timeout_s`
    unless configured."""
    import fsspec.config

    configured = dict(fsspec.config.conf.get("s3", {}).get("config_kwargs") or {})
    config = {**configured, **dict(options.get("config_kwargs") or {})}
    config = {"connect_timeout": timeout_s, "read_timeout": timeout_s, **config}
    if (
        "retries" in config
        or os.environ.get("AWS_MAX_ATTEMPTS")
        or os.environ.get("AWS_RETRY_MODE")
    ):
        return {**options, "config_kwargs": config}
    return {**options, "config_kwargs": {**config, "retries": {"max_attempts": 0}}}


def redact(text: Any) -> str:
    """`text` (a URL, a message) without the credentials a URL carries: its userinfo and
    its query values (`?token=...`, a presigned URL's `X-Amz-Signature=...`)."""
    return redact_url_secrets(str(text))


def redacted_options(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """storage_options for a repr or a message: the values of credential-like names (and
    of nested mappings' ones) replaced by "***"."""
    if options is None:
        return None
    return {
        k: (
            redacted_options(v)
            if isinstance(v, Mapping)
            else "***"
            if SECRET_NAMES.search(str(k).lower())
            else v
        )
        for k, v in options.items()
    }
