"""Retries for remote reads: which errors are worth retrying, and how long to wait.

Every remote call of the converter (hub metadata, file downloads, fsspec listings and
reads) and of the remote dataset reader (`jaxload.storage.remote`: byte ranges of shards
in gs://, s3://, hf://, https://) goes through `call_with_retries`. It lives in the
runtime package so training hosts need none of the converter's dependencies.
Transient transport errors (timeouts, dropped or
refused connections, HTTP 408/429/5xx) are retried with capped exponential backoff; a
missing file (404), an authentication problem (401/403) or anything else fails at once,
because waiting cannot fix it. Corrupt data is found by the readers after the fetch and
is never retried either. The request that decides whether SRC is a hub dataset at all
(`HubFiles.resolve`) also fails at once when the host cannot be reached (`reachability`):
SRC may just as well be a mistyped local path, and 13 s of retries would hide that.

The HTTP status is read wherever the client libraries keep it (`_http_status`): requests
and httpx on `response.status_code`, aiohttp on `status`, botocore (s3fs) in the dict
`response["ResponseMetadata"]["HTTPStatusCode"]`, gcsfs on `HttpError.code`. s3fs turns
a 503 into an OSError with errno EBUSY and a 500 into one with EREMOTEIO, so without the
botocore status a 5xx would look permanent and a 403 would not read as access denied.

Example::

    policy = RetryPolicy(attempts=5)
    data = call_with_retries(lambda: fs.cat_file(url), what=url, policy=policy)
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from jaxload.errors import RemoteError  # defined there; imported from here too
from jaxload.storage.urls import redact

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT = "transient"
MISSING = "missing"
AUTH = "auth"
PERMANENT = "permanent"
# Kinds of a failed first request under `fail_fast_unreachable` (see `reachability`).
OFFLINE = "offline"
UNREACHABLE = "unreachable"

TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
MISSING_STATUS = frozenset({404, 410})
AUTH_STATUS = frozenset({401, 403})
# botocore found no credentials (or half of them): the user's to fix, said as such.
NO_CREDENTIALS = frozenset({"NoCredentialsError", "PartialCredentialsError"})
# Exception class names (anywhere in the MRO) of transport failures in the HTTP and cloud
# client libraries fsspec and huggingface_hub use (httpx, requests, aiohttp, botocore,
# google-auth), matched by name so none of them has to be imported here.
TRANSIENT_CLASS_NAMES = frozenset(
    {
        "TransportError",  # httpx (ConnectError, ReadTimeout, ...), google.auth
        "TimeoutException",
        "NetworkError",
        "RemoteProtocolError",
        "ConnectionError",  # requests (not the builtin: a RequestException)
        "Timeout",
        "ChunkedEncodingError",
        "ConnectTimeout",
        "ReadTimeout",
        "ClientConnectionError",  # aiohttp
        "ClientPayloadError",
        "ServerTimeoutError",
        "EndpointConnectionError",  # botocore
        "ConnectionClosedError",
        "ReadTimeoutError",
        "IncompleteRead",  # http.client
        "RemoteDisconnected",
    }
)
# Failures to open a connection at all (refused, no route, name not resolved): the host is
# not there, as opposed to a request it dropped or answered with an error.
CONNECT_CLASS_NAMES = frozenset(
    {
        "ConnectError",  # httpx
        "ConnectTimeout",
        "ConnectionRefusedError",
        "gaierror",  # socket: name not resolved
        "NewConnectionError",  # urllib3
        "NameResolutionError",
        "ClientConnectorError",  # aiohttp
        "EndpointConnectionError",  # botocore
    }
)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff: try `attempts` times, waiting base, 2 base, 4 base, ...
    (at most `max_delay`) between tries, each wait shortened by up to `jitter` of itself.

    The jitter is derived from a hash of (what, retry), not from a random generator, so a
    run's waits are reproducible and still differ between files (no thundering herd).
    `sleep` is injectable for tests.
    """

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: float = 0.5
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")

    def delay(self, retry: int, what: str) -> float:
        """Seconds to wait before retry number `retry` (0-based) of `what`."""
        capped = min(self.max_delay, self.base_delay * 2**retry)
        digest = hashlib.sha256(f"{what}\0{retry}".encode()).digest()
        fraction = int.from_bytes(digest[:8], "little") / 2**64
        return capped * (1.0 - self.jitter * fraction)


class RetryCounter:
    """How many retries this process made (reported per work unit and in the summary)."""

    def __init__(self) -> None:
        self.retries = 0


def call_with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy,
    counter: RetryCounter | None = None,
    missing: str | None = None,
    fail_fast_unreachable: bool = False,
    warn: Callable[..., None] | None = None,
) -> T:
    """Returns fn(), retrying transient errors under `policy`; each retry is said through
    `warn` (logging-style arguments; default: a warning on this module's logger).

    Raises `RemoteError` naming `what`: at once for a missing file (with `missing` as the
    context, e.g. "video of episode 3"), a denied access or any non-transient error, and
    after the last attempt for a transient one. With `fail_fast_unreachable`, also at once
    (kind OFFLINE or UNREACHABLE) when no connection could be opened at all.
    """
    started, what = time.monotonic(), redact(what)
    for attempt in range(policy.attempts):
        try:
            return fn()
        except Exception as error:
            reach = reachability(error) if fail_fast_unreachable else None
            if reach is not None:
                raise RemoteError(f"{what}: {describe(error)}", reach) from error
            kind = classify(error)
            if kind != TRANSIENT:
                message = redact(_final_message(what, kind, error, missing))
                raise RemoteError(message, kind) from error
            if attempt + 1 == policy.attempts:
                waited = time.monotonic() - started
                raise RemoteError(
                    f"{what}: giving up after {policy.attempts} attempts over {waited:.1f} s "
                    f"({describe(error)})",
                    TRANSIENT,
                ) from error
            wait = policy.delay(attempt, what)
            if counter is not None:
                counter.retries += 1
            (warn or log.warning)(
                "%s: %s; retry %d of %d in %.2f s",
                what,
                describe(error),
                attempt + 1,
                policy.attempts - 1,
                wait,
            )
            policy.sleep(wait)
    raise AssertionError("unreachable")


def classify(error: BaseException) -> str:
    """TRANSIENT, MISSING, AUTH or PERMANENT, judged along the exception's cause chain.

    huggingface_hub wraps a refused connection in `LocalEntryNotFoundError` (a
    FileNotFoundError), so causes are looked at before the wrapper's own type.
    """
    for exc in _chain(error):
        names = {cls.__name__ for cls in inspect.getmro(type(exc))}
        if "OfflineModeIsEnabled" in names:
            return PERMANENT  # the user asked for no network: retrying cannot help
        status = _http_status(exc)
        if status is not None:
            if status in TRANSIENT_STATUS or status >= 500:
                return TRANSIENT
            if status in MISSING_STATUS:
                return MISSING
            if status in AUTH_STATUS:
                return AUTH
            return PERMANENT
        if names & {"RepositoryNotFoundError", "RevisionNotFoundError", "RemoteEntryNotFoundError"}:
            return MISSING
        if names & {"GatedRepoError", *NO_CREDENTIALS}:
            return AUTH
        if isinstance(exc, TimeoutError | ConnectionError) or names & TRANSIENT_CLASS_NAMES:
            return TRANSIENT
    # No transport problem anywhere in the chain: judge the outermost error.
    if isinstance(error, FileNotFoundError):
        return MISSING
    if isinstance(error, PermissionError):
        return AUTH
    return PERMANENT


def reachability(error: BaseException) -> str | None:
    """OFFLINE (HF_HUB_OFFLINE), UNREACHABLE (no connection could be opened) or None (the
    host answered, or the failure came later), judged along the cause chain."""
    for exc in _chain(error):
        names = {cls.__name__ for cls in inspect.getmro(type(exc))}
        if "OfflineModeIsEnabled" in names:
            return OFFLINE
        if names & CONNECT_CLASS_NAMES:
            return UNREACHABLE
    return None


def describe(error: BaseException) -> str:
    """A one-line account of an error: its type and message, and the root cause's (URL
    credentials left out)."""
    root = list(_chain(error))[-1]
    text = f"{type(error).__name__}: {_first_line(error)}"
    if root is not error and _first_line(root) != _first_line(error):  # say a thing once
        text += f"; caused by {type(root).__name__}: {_first_line(root)}"
    return redact(text)


def _final_message(what: str, kind: str, error: BaseException, missing: str | None) -> str:
    if kind == MISSING and no_such_bucket(error):
        # Said as such: "missing (is it a jaxload dataset?)" would send the user looking
        # for a file when the bucket name is wrong.
        return (
            f"{what}: bucket {_bucket(what)} does not exist (or these credentials cannot see "
            f"it): {describe(error)}"
        )
    if kind == MISSING:
        context = f" ({missing})" if missing else ""
        return f"{what}: missing{context}: {describe(error)}"
    if kind == PERMANENT and _unknown_option(error):
        return (
            f"{what}: {describe(error)}; a storage_options name the filesystem does not take "
            "(s3fs's: endpoint_url, key, secret, anon, client_kwargs, config_kwargs, ...)"
        )
    if kind == AUTH:
        said = "no credentials found" if no_credentials(error) else "access denied"
        return f"{what}: {said} ({describe(error)}); {_credentials_hint(what)}"
    return f"{what}: {describe(error)}"


def past_the_end(error: BaseException) -> bool:
    """The store refused a byte range as lying past the end of its object (HTTP 416,
    S3's InvalidRange), anywhere in `error`'s cause chain."""
    return any(_http_status(exc) == 416 or "InvalidRange" in str(exc) for exc in _chain(error))


def no_credentials(error: BaseException) -> bool:
    """The client found no credentials (botocore's NoCredentialsError and kin), anywhere in
    `error`'s cause chain."""
    return any(
        cls.__name__ in NO_CREDENTIALS for exc in _chain(error) for cls in inspect.getmro(type(exc))
    )


def _unknown_option(error: BaseException) -> bool:
    """A client built lazily from storage_options refused one of them (a TypeError at the
    first request, e.g. `endpoint=` for s3fs's `endpoint_url=`)."""
    return any(
        isinstance(exc, TypeError) and "unexpected keyword argument" in str(exc)
        for exc in _chain(error)
    )


def _credentials_hint(what: str) -> str:
    scheme = what.partition("://")[0].lower() if "://" in what else ""
    if scheme == "s3":
        return (
            "check the AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, or storage_options key=/secret=; CLI: --storage-option)"
        )
    if scheme in ("gs", "gcs"):
        return (
            "check the Google credentials (`gcloud auth application-default login`, "
            "GOOGLE_APPLICATION_CREDENTIALS, or storage_options token=)"
        )
    if scheme in ("", "hf") or "huggingface.co" in what:
        return "for a private or gated hub dataset log in with `hf auth login` or set HF_TOKEN"
    return "check the credentials given in storage_options"


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    exc: BaseException | None = error
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status `exc` carries, in any of the client libraries' places (module
    docstring), or None."""
    response = getattr(exc, "response", None)
    values = [
        getattr(response, "status_code", None),
        getattr(response, "status", None),
        getattr(exc, "status_code", None),
        getattr(exc, "status", None),
    ]
    if isinstance(response, dict):  # botocore's ClientError
        metadata = response.get("ResponseMetadata")
        values.append(metadata.get("HTTPStatusCode") if isinstance(metadata, dict) else None)
    if _is_http_error(exc):  # gcsfs's HttpError, urllib's HTTPError: `code`
        code = getattr(exc, "code", None)
        # gcsfs copies `code` from the JSON error body, where it may be a string.
        values.append(int(code) if isinstance(code, str) and code.isdigit() else code)
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    return None


def _is_http_error(exc: BaseException) -> bool:
    # `code` means other things on other errors (exit codes, websocket close codes): it is
    # read only on the HTTP error types, matched by name so gcsfs need not be imported.
    return any(cls.__name__ in ("HttpError", "HTTPError") for cls in inspect.getmro(type(exc)))


def no_such_bucket(error: BaseException) -> bool:
    """Whether the store said the bucket does not exist (S3's NoSuchBucket error code;
    s3fs and gcsfs say "The specified bucket does not exist")."""
    for exc in _chain(error):
        response = getattr(exc, "response", None)
        code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
        if code == "NoSuchBucket" or type(exc).__name__ == "NoSuchBucket":
            return True
        if "bucket does not exist" in str(exc).lower():
            return True
    return False


def _bucket(what: str) -> str:
    """'name' of the bucket in `what` (a URL, maybe followed by " bytes a..b")."""
    _, sep, rest = what.partition("://")
    name = rest.split("/")[0].split(" ")[0] if sep else ""
    return repr(name) if name else "(the URL's first component)"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else "(no message)"
