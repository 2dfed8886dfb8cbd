"""No secret and no presigned signature in any log line or error (issue #44).

Before: credentials in a URL's query string (`?token=...`) were echoed in errors (userinfo
was masked); at root DEBUG logging urllib3 logged every presigned URL jaxload made (valid an
hour, signature included) and fsspec's http logger printed `https://user:password@...` as
given. Here root logging is at DEBUG and every record of every logger is captured, through
a succeeding run (presigned ranges from the local S3 server) and failing ones, with
secrets planted in storage_options, in a URL's userinfo and in its query string.
"""

import logging
import re
from urllib.parse import unquote

import pytest

import jaxload
from jaxload.converters.convert import convert
from jaxload.storage import ranges, secrets
from jaxload.storage.remote import RemoteOptions
from jaxload.storage.retry import RetryPolicy
from jaxload.storage.urls import redact
from tests.support.lerobot_factory import write_lerobot_v3

pytest.importorskip("s3fs", reason="the remote extra (pip install 'jaxload[remote]') is needed")
pytest.importorskip("moto", reason="moto[server] (the dev extra) runs the S3 test server")

from tests.support.s3_server import S3Server

pytestmark = pytest.mark.processes  # the S3 test server is a subprocess

KEY, SECRET = "AKIAPLANTEDKEY7f3e", "PLANTED-SECRET-9b2c4e"
PASSWORD, TOKEN, SESSION = "PLANTED-PW-51d0a", "PLANTED-TOKEN-c8e13", "PLANTED-SESSION-0aa7"
FAST = RemoteOptions(retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    src = write_lerobot_v3(root / "src", episode_lengths=(6, 9), cameras={"cam": (24, 64)})
    out = convert(src, root / "ds", workers=1, progress=False).out
    server = S3Server.start()
    try:
        server.upload(str(out), "s3://bucket/ds")
        yield server
    finally:
        server.stop()


def _planted_options(server) -> dict:
    # moto accepts any credentials: these sign real requests and presigned URLs
    options = server.storage_options() | {"key": KEY, "secret": SECRET, "token": SESSION}
    return options


def _texts(error: BaseException) -> list[str]:
    out = []
    while error is not None:
        out += [str(error), repr(error)]
        error = error.__cause__ or error.__context__
    return out


def test_no_secret_or_signature_in_any_log_line_or_error(server, caplog, monkeypatch):
    signed: list[str] = []
    url_of = ranges.SignedRanges.url

    def recording(self, relative, fresh=False):
        signed.append(url_of(self, relative, fresh))
        return signed[-1]

    monkeypatch.setattr(ranges.SignedRanges, "url", recording)
    options = _planted_options(server)
    host = server.endpoint.removeprefix("http://")
    errors: list[str] = []
    with caplog.at_level(logging.DEBUG):  # the root logger, every library under it
        # succeeds: metadata through s3fs, records through presigned URLs and urllib3
        ds = jaxload.open("s3://bucket/ds", storage_options=options, remote=FAST)
        assert len(ds.__getitems__(range(len(ds)))) == 15
        loader = jaxload.make_loader(
            "s3://bucket/ds",
            global_batch_size=4,
            storage_options=options,
            remote=FAST,
            options=jaxload.PipelineOptions(num_workers=0),
        )
        next(loader)
        loader.close()
        # fail: no such bucket; a password and a query token in an http URL; a query token
        # in an s3 URL
        for url, storage_options in [
            ("s3://no-such-bucket/ds", options),
            (f"http://reader:{PASSWORD}@{host}/bucket/ds?token={TOKEN}", None),
            (f"https://reader:{PASSWORD}@127.0.0.1:9/ds?X-Amz-Signature={TOKEN}", None),
            (f"s3://bucket/ds?token={TOKEN}", options),
        ]:
            try:
                jaxload.open(url, storage_options=storage_options, remote=FAST)
            except Exception as e:  # what a user sees: the whole chain's text
                errors += _texts(e)
            else:
                raise AssertionError(f"{redact(url)} opened")
    assert signed, "the presigned path was not taken"
    found = [m for u in signed for m in re.findall(r"[?&](?:X-Amz-)?Signature=([^&]+)", u)]
    signatures = {*found, *map(unquote, found)}
    assert signatures
    lines = [r.getMessage() for r in caplog.records] + errors
    for planted in (SECRET, PASSWORD, TOKEN, SESSION, *signatures):
        leaked = [line for line in lines if planted in line]
        assert leaked == [], (planted[:8], leaked[:3])
    assert not [line for line in lines if re.search(r"Signature=(?!\*\*\*)", line)]
    assert any("***@" in e for e in errors) and any("token=***" in e for e in errors)


def test_redact_masks_userinfo_and_query_values():
    url = "https://me:pw@host/a/b?X-Amz-Signature=abc123&token=t0k#frag"
    assert redact(url) == "https://***@host/a/b?X-Amz-Signature=***&token=***#frag"
    assert redact("is the dataset in storage damaged? yes") == (
        "is the dataset in storage damaged? yes"
    )


def test_userinfo_is_moved_out_of_the_url_before_fsspec_sees_it():
    assert secrets.split_userinfo("https://me:p%40ss@host:1/ds?x=1") == (
        "https://host:1/ds?x=1",
        ("me", "p@ss"),
    )
    assert secrets.split_userinfo("s3://bucket/a@b") == ("s3://bucket/a@b", None)
