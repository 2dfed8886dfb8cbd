"""`RemoteError` and how `jaxload.storage.retry` classifies the errors of the object-store
clients: botocore (s3fs) keeps the HTTP status in a dict, gcsfs in `HttpError.code`, and s3fs
turns both into OSErrors whose errno says nothing of the status. No server here; the S3
round trips are in tests/cli/test_cli_remote.py."""

import errno
import pickle

import pytest

import jaxload.errors
from jaxload.converters.storage import storage_errors
from jaxload.errors import DatasetError, JaxloadError, RemoteError, SourceError
from jaxload.storage import retry
from jaxload.storage.retry import AUTH, MISSING, PERMANENT, TRANSIENT, RetryPolicy, classify

botocore_exceptions = pytest.importorskip("botocore.exceptions")
s3fs_errors = pytest.importorskip("s3fs.errors")

NO_WAIT = RetryPolicy(attempts=3, base_delay=0.0, sleep=lambda _: None)


def _client_error(status: int, code: str, message: str = "message") -> Exception:
    """A botocore ClientError as aiobotocore raises it for an error answer."""
    response = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore_exceptions.ClientError(response, "GetObject")


def _as_s3fs_raises(error: Exception) -> Exception:
    """The error s3fs raises for a ClientError: translated, the ClientError its cause."""
    try:
        try:
            raise error
        except botocore_exceptions.ClientError as e:
            raise s3fs_errors.translate_boto_error(e) from e
    except Exception as translated:
        return translated


class HttpError(Exception):
    """Stands in for gcsfs.retry.HttpError (gcsfs is not installed here): the status in
    `code`, copied from the JSON error body (an int, sometimes a string)."""

    def __init__(self, code):
        super().__init__(f"message, {code}")
        self.code = code


def test_remote_error_is_a_jaxload_error_of_its_own_importable_from_everywhere():
    assert retry.RemoteError is RemoteError is jaxload.errors.RemoteError
    assert issubclass(RemoteError, JaxloadError)
    # A transport failure, whether of a source, an upload or a converted dataset.
    assert not issubclass(RemoteError, SourceError)
    assert not issubclass(RemoteError, DatasetError)


def test_remote_error_survives_pickling_with_its_kind():
    """A converter worker's RemoteError crosses a process boundary."""
    error = RemoteError("s3://b/x: missing", MISSING)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is RemoteError and str(again) == str(error) and again.kind == MISSING


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (500, "InternalError", TRANSIENT),
        (503, "SlowDown", TRANSIENT),
        (429, "TooManyRequests", TRANSIENT),
        (403, "AccessDenied", AUTH),
        (404, "NoSuchKey", MISSING),
        (400, "InvalidRequest", PERMANENT),
    ],
)
def test_botocore_status_in_its_response_dict_is_read(status, code, kind):
    error = _client_error(status, code)
    assert classify(error) == kind
    # s3fs's translation (e.g. OSError(EBUSY) for SlowDown, OSError(EREMOTEIO) for a 500)
    # does not hide it.
    assert classify(_as_s3fs_raises(error)) == kind


@pytest.mark.parametrize(
    ("code", "kind"),
    [(503, TRANSIENT), ("500", TRANSIENT), (429, TRANSIENT), (401, AUTH), (400, PERMANENT)],
)
def test_gcsfs_http_error_code_is_read(code, kind):
    assert classify(HttpError(code)) == kind


def test_code_of_an_error_that_is_no_http_error_is_not_a_status():
    class ToolError(Exception):
        code = 503  # an exit code, say: not an HTTP status

    assert classify(ToolError("boom")) == PERMANENT


def test_a_persistent_500_is_retried_then_reported_as_transient():
    calls = []

    def fail():
        calls.append(1)
        raise _as_s3fs_raises(_client_error(500, "InternalError"))

    with pytest.raises(RemoteError, match=r"s3://b/x: giving up after 3 attempts") as error:
        retry.call_with_retries(fail, what="s3://b/x", policy=NO_WAIT)
    assert error.value.kind == TRANSIENT and len(calls) == 3


def test_a_missing_bucket_is_said_to_be_one():
    def fail():
        raise _as_s3fs_raises(_client_error(404, "NoSuchBucket", "The bucket does not exist"))

    with pytest.raises(RemoteError) as error:
        retry.call_with_retries(
            fail, what="s3://nobucket/ds/meta/info.json", policy=NO_WAIT, missing="a dataset?"
        )
    assert error.value.kind == MISSING
    assert str(error.value).startswith(
        "s3://nobucket/ds/meta/info.json: bucket 'nobucket' does not exist"
    )
    assert "a dataset?" not in str(error.value)  # the missing file is not the problem


def test_a_remote_error_in_a_conversion_is_not_taken_for_a_local_disk_problem():
    """s3fs raises PermissionError (errno EACCES) for a 403: the RemoteError's own message
    (naming the URL) stands, not "permission denied ... fix the permissions"."""
    denied = RemoteError("s3://b/x/meta/info.json: access denied", AUTH)
    with pytest.raises(RemoteError) as error, storage_errors("s3://b/x"):
        raise denied from PermissionError(errno.EACCES, "Access Denied")
    assert error.value is denied


@pytest.mark.parametrize(
    "url, hint",
    [
        ("s3://b/ds/meta/info.json", "AWS_ACCESS_KEY_ID"),
        ("gs://b/ds/meta/info.json", "GOOGLE_APPLICATION_CREDENTIALS"),
        ("hf://datasets/o/n/meta/info.json", "hf auth login"),
        ("https://example.com/ds/meta/info.json", "storage_options"),
    ],
)
def test_access_denied_points_at_the_credentials_of_the_store_in_question(url, hint):
    def fail():
        raise _as_s3fs_raises(_client_error(403, "AccessDenied", "Forbidden"))

    with pytest.raises(RemoteError) as error:
        retry.call_with_retries(fail, what=url, policy=NO_WAIT)
    assert error.value.kind == AUTH and str(error.value).startswith(f"{url}: access denied")
    assert hint in str(error.value)
    if not url.startswith("hf://"):
        assert "hf auth" not in str(error.value)


# --- the policy, the loop and the messages, without a client library --------------------


def test_the_backoff_doubles_up_to_its_cap_with_a_reproducible_jitter():
    policy = RetryPolicy(attempts=8, base_delay=1.0, max_delay=4.0, jitter=0.5)
    delays = [policy.delay(r, "s3://b/x") for r in range(5)]
    for r, d in enumerate(delays):
        full = min(4.0, 2.0**r)
        assert full * 0.5 <= d <= full, (r, d)
    assert delays == [policy.delay(r, "s3://b/x") for r in range(5)]  # a pure function
    assert delays != [policy.delay(r, "s3://b/y") for r in range(5)]  # differs per file
    assert RetryPolicy(jitter=0.0, base_delay=0.5).delay(1, "x") == 1.0
    with pytest.raises(ValueError, match="attempts must be >= 1, got 0"):
        RetryPolicy(attempts=0)


def test_transient_errors_are_retried_counted_and_said_then_succeed():
    calls, said, waited = [], [], []
    policy = RetryPolicy(attempts=3, base_delay=0.0, sleep=waited.append)
    counter = retry.RetryCounter()

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise TimeoutError("read timed out")
        return b"ok"

    out = retry.call_with_retries(
        flaky, what="s3://b/ds/x", policy=policy, counter=counter, warn=lambda *a: said.append(a)
    )
    assert out == b"ok" and counter.retries == 2 and len(waited) == 2
    assert said[0][1:3] == ("s3://b/ds/x", "TimeoutError: read timed out")


def test_a_missing_file_is_not_retried_and_says_what_it_was_for():
    calls = []

    def missing():
        calls.append(1)
        raise FileNotFoundError("no such key")

    with pytest.raises(RemoteError, match=r"^s3://b/ds/x: missing \(video of episode 3\): "
                       r"FileNotFoundError: no such key") as raised:  # fmt: skip
        retry.call_with_retries(missing, what="s3://b/ds/x", policy=NO_WAIT,
                                missing="video of episode 3")  # fmt: skip
    assert raised.value.kind == MISSING and calls == [1]


def test_an_unreachable_host_fails_at_once_when_asked_to():
    calls = []

    def unreachable():
        calls.append(1)
        raise OSError("cannot connect") from ConnectionRefusedError("connection refused")

    with pytest.raises(RemoteError) as raised:
        retry.call_with_retries(
            unreachable, what="https://h/x", policy=NO_WAIT, fail_fast_unreachable=True
        )
    assert raised.value.kind == retry.UNREACHABLE and calls == [1]
    assert "caused by ConnectionRefusedError: connection refused" in str(raised.value)
    with pytest.raises(RemoteError, match="giving up after 3 attempts"):  # without: retried
        retry.call_with_retries(unreachable, what="https://h/x", policy=NO_WAIT)
    assert len(calls) == 4


def test_classify_reads_the_outermost_error_when_no_cause_says_more():
    assert classify(ConnectionResetError()) == TRANSIENT
    assert classify(PermissionError("denied")) == AUTH
    assert classify(ValueError("bad")) == PERMANENT
    assert classify(TypeError("__init__() got an unexpected keyword argument 'endpoint'")) == (
        PERMANENT
    )
    message = retry._final_message(
        "s3://b/x", PERMANENT, TypeError("got an unexpected keyword argument 'endpoint'"), None
    )
    assert "a storage_options name the filesystem does not take" in message
