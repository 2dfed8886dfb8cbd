"""The S3 test server's ranged-GET fast path (tests/support/s3_server.py): moto reads a whole
object to answer a ranged GET (the cost the fast path removes), and the fast path, served
from a real socket (it sends the range with os.sendfile), answers exactly as moto does
through werkzeug's test client."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("moto")

from moto.s3 import models
from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client

from tests.support.s3_server import RangedGets

AUTH = {"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request"}


class Served:
    """`app` on a real loopback socket (werkzeug's threaded server, as tests/support/s3_server.py
    runs it); get() answers like werkzeug's test client: status, data, headers."""

    def __init__(self, app):
        from werkzeug.serving import make_server

        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def get(self, path: str, headers: dict):
        url = f"http://127.0.0.1:{self.server.server_port}{path}"
        try:
            response = urllib.request.urlopen(urllib.request.Request(url, headers=headers))
        except urllib.error.HTTPError as error:
            response = error
        with response:
            data = response.read()
        return type(
            "Answer",
            (),
            {"status_code": response.status, "data": data, "headers": response.headers},
        )


@pytest.fixture(scope="module")
def servers():
    moto_app = DomainDispatcherApplication(create_backend_app)
    plain, fast = Client(moto_app), Served(RangedGets(moto_app))
    payload = np.random.default_rng(0).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
    assert plain.put("/rg-bucket", headers=AUTH).status_code == 200
    assert plain.put("/rg-bucket/dir/shard-0", data=payload, headers=AUTH).status_code == 200
    yield plain, fast, payload
    fast.server.shutdown()


def test_moto_reads_the_whole_object_for_a_ranged_get(servers, monkeypatch):
    """The bug the fast path works around: remove RangedGets when this fails."""
    plain, _, payload = servers
    lengths = []
    original = models.FakeKey.value.fget

    def counting(key):
        data = original(key)
        lengths.append(len(data))
        return data

    monkeypatch.setattr(models.FakeKey, "value", property(counting, models.FakeKey.value.fset))
    response = plain.get("/rg-bucket/dir/shard-0", headers={**AUTH, "Range": "bytes=10-19"})
    assert response.status_code == 206 and response.data == payload[10:20]
    assert lengths and max(lengths) == len(payload)  # 3 MiB read for 10 bytes


@pytest.mark.parametrize(
    "first,last",
    [(0, 0), (10, 19), (1000, 1 << 20), ((3 << 20) - 5, (3 << 20) - 1), (100, 10 << 20)],
)
def test_fast_path_answers_as_moto_does(servers, first, last):
    plain, fast, payload = servers
    headers = {**AUTH, "Range": f"bytes={first}-{last}"}
    want, got = (
        plain.get("/rg-bucket/dir/shard-0", headers=headers),
        fast.get("/rg-bucket/dir/shard-0", headers=headers),
    )
    assert got.status_code == want.status_code == 206
    assert got.data == want.data == payload[first : last + 1]
    for name in ("Content-Range", "Content-Length", "ETag", "Last-Modified"):
        assert got.headers[name] == want.headers[name], name


@pytest.mark.parametrize(
    "path,range_",
    [
        ("/rg-bucket/dir/missing", "bytes=0-9"),
        ("/rg-nobucket/x", "bytes=0-9"),
        ("/rg-bucket/dir/shard-0", "bytes=9999999-99999999"),
    ],
)
def test_anything_else_is_answered_by_moto(servers, path, range_):
    plain, fast, _ = servers
    headers = {**AUTH, "Range": range_}
    want, got = plain.get(path, headers=headers), fast.get(path, headers=headers)
    assert got.status_code == want.status_code >= 400


@pytest.fixture(scope="module")
def store():
    """The test server subprocess, as tests and benchmarks run it, with a 1 MiB object and
    a presigned URL of it."""
    from tests.support.s3_server import S3Server

    server = S3Server.start()
    try:
        fs = server.filesystem()
        server.create_bucket("ka-bucket")
        payload = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
        fs.pipe("ka-bucket/blob", payload)
        yield server, fs.sign("ka-bucket/blob", expiration=600), payload
    finally:
        server.stop()


def _get(connection, url: str, first: int, last: int):
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    connection.request(
        "GET", f"{parts.path}?{parts.query}", headers={"Range": f"bytes={first}-{last}"}
    )
    response = connection.getresponse()
    return response, response.read()


@pytest.mark.processes
def test_ranged_gets_keep_their_connection_open_as_a_real_store_does(store):
    """werkzeug closes every connection; a real store keeps it for the next request, and a
    new connection per request cost the benchmark's client CPU that no store charges. On
    one kept-alive connection, small ranges come back without waiting for a delayed ACK
    (40 ms, when the headers and the sendfile'd body were held back by Nagle)."""
    import http.client
    import time
    from urllib.parse import urlsplit

    server, url, payload = store
    server.reset_counters()
    connection = http.client.HTTPConnection(urlsplit(url).hostname, urlsplit(url).port)
    walls = []
    for first in range(0, 20 * 5000, 5000):
        began = time.perf_counter()
        response, data = _get(connection, url, first, first + 4999)
        walls.append(time.perf_counter() - began)
        assert response.status == 206 and data == payload[first : first + 5000]
        assert not response.will_close
    sock = connection.sock
    response, data = _get(connection, url, 1000, 1 << 21)  # past the end: clipped
    assert data == payload[1000:] and connection.sock is sock  # still the first connection
    connection.close()
    assert sorted(walls)[len(walls) // 2] < 0.02
    assert server.counters() == {
        "requests": 21,
        "bytes": 20 * 5000 + len(payload) - 1000,
        "failed": 0,
    }


@pytest.mark.processes
def test_a_fault_on_a_kept_alive_connection_is_answered_and_closes_it(store):
    import http.client
    from urllib.parse import urlsplit

    server, url, payload = store
    server.reset_counters()
    server.set(fail={"match": "ka-bucket/blob", "status": 503, "count": 1})
    connection = http.client.HTTPConnection(urlsplit(url).hostname, urlsplit(url).port)
    response, data = _get(connection, url, 0, 99)
    assert response.status == 503 and b"SlowDown" in data and response.will_close
    connection.close()
    connection = http.client.HTTPConnection(urlsplit(url).hostname, urlsplit(url).port)
    response, data = _get(connection, url, 0, 99)
    assert response.status == 206 and data == payload[:100]
    connection.close()
    assert server.counters() == {"requests": 2, "bytes": 100, "failed": 1}
