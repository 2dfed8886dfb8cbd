"""Credentials never reach a log line or an error: URLs are cleaned before the libraries
see them, and the libraries' own loggers are kept from printing them.

A URL can carry a secret in two places: its userinfo (`https://user:password@host/...`)
and its query (`?token=...`, a presigned URL's `X-Amz-Signature=...`). `jaxload.storage.urls
.redact` masks both in jaxload's messages. The libraries jaxload calls log them too at
DEBUG: urllib3 every request line (a presigned URL, valid an hour, signature included),
fsspec's http filesystem the URL as given (userinfo included), botocore each request's
signature. So, when jaxload opens a filesystem (`urls.filesystem`):

- userinfo is moved out of an http(s) URL into the client's auth (`split_userinfo`), so
  aiohttp and fsspec never hold a URL with a password; other schemes refuse it (their
  credentials go in `storage_options`);
- those libraries' loggers (`LIBRARY_LOGGERS`) whose level nobody set are set to INFO:
  their DEBUG output is request lines and signatures (set a level yourself to see it);
- a `RedactingFilter` on the loggers that log URLs or signatures masks userinfo, query
  values, signatures and every secret value jaxload was given (storage_options entries of
  credential-like names, URL passwords), whatever level is set.

    url, auth = split_userinfo("https://me:pw@host/ds")   # "https://host/ds", ("me", "pw")
    guard_library_logs(["pw"])
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

# Logger trees of the libraries jaxload reads URLs through.
LIBRARY_LOGGERS = (
    "urllib3",
    "fsspec",
    "s3fs",
    "botocore",
    "aiobotocore",
    "aiohttp",
    "gcsfs",
    "google.auth",
    "huggingface_hub",
)
# The loggers among them that log URLs, request headers or signatures (a filter applies to
# the records of the logger it is on, not of its children: each is named).
URL_LOGGERS = (
    "urllib3.connectionpool",
    "fsspec",
    "fsspec.http",
    "s3fs",
    "botocore.auth",
    "botocore.endpoint",
    "botocore.hooks",
    "botocore.parsers",
    "botocore.retryhandler",
    "botocore.httpsession",
    "aiobotocore.endpoint",
    "aiobotocore.httpsession",
    "gcsfs",
    "huggingface_hub",
)

_USERINFO = re.compile(r"(?<=://)[^/@\s'\"]+@")
# A query parameter's value: `?name=value` or `&name=value`, up to the next separator.
_QUERY_VALUE = re.compile(r"(?<=[?&])([A-Za-z0-9_.\-]+)=[^&\s'\"#<>]*")
# botocore's signatures and credentials in headers and debug lines.
_SIGNATURE = re.compile(r"(Signature|Credential)(\s*[=:]\s*)[^\s,'\"&]+", re.IGNORECASE)
# storage_options names whose values are credentials (s3fs, gcsfs, huggingface_hub, ...).
SECRET_NAMES = re.compile(r"key|secret|token|password|passwd|credential|session|auth|private")

_secrets: set[str] = set()
_lock = threading.Lock()
_guarded = False


def redact_url_secrets(text: str) -> str:
    """`text` with URL userinfo and query values masked ("***")."""
    return _QUERY_VALUE.sub(r"\1=***", _USERINFO.sub("***@", text))


def redact_all(text: str) -> str:
    """`text` with URL secrets, signatures and every registered secret value masked."""
    text = _SIGNATURE.sub(r"\1\2***", redact_url_secrets(text))
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's message (its arguments formatted in first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not format: leave it to logging
            return True
        cleaned = redact_all(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_FILTER = RedactingFilter()


def secret_values(options: Mapping[str, Any] | None) -> list[str]:
    """The string values of credential-like names in `options` (nested mappings too)."""
    found: list[str] = []
    for key, value in (options or {}).items():
        if isinstance(value, Mapping):
            found += secret_values(value)
        elif isinstance(value, str) and value and SECRET_NAMES.search(str(key).lower()):
            found.append(value)
    return found


def guard_library_logs(secrets: Iterable[str] = ()) -> None:
    """Registers `secrets` (masked in the guarded loggers' records) and, once per process,
    sets the libraries' unset logger levels to INFO and puts the redacting filter on the
    loggers that log URLs (module docstring)."""
    global _guarded
    with _lock:
        _secrets.update(s for s in secrets if len(s) >= 4)  # a 1-3 char "secret" masks text
        first, _guarded = not _guarded, True
    if not first:
        return
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    for name in URL_LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """(the URL without userinfo, (user, password) or None)."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if not sep or "@" not in authority:
        return url, None
    userinfo, _, host = authority.rpartition("@")
    user, _, password = userinfo.partition(":")
    return f"{scheme}{sep}{host}{slash}{path}", (unquote(user), unquote(password))
