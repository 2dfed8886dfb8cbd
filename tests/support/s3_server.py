"""A real S3-compatible server on loopback for tests and benchmarks: moto's server mode
behind a small WSGI layer that adds latency and faults and counts what it serves.

    server = S3Server.start(latency_s=0.05)       # a subprocess on 127.0.0.1:<free port>
    fs = server.filesystem()                      # s3fs, pointed at it
    server.set(fail={"match": "shard-00000", "status": 503, "count": 2})
    server.counters()                             # {"requests", "bytes", "failed"}
    server.stop()

The server runs in its own process (as a real one would), so its CPU does not share the
client's GIL. Control requests go to `/_jaxload/...`, which never reach moto.

moto reads an object whole for every ranged GET (`FakeKey.value`, then a slice): 10 ms of
server CPU per request on a 32 MB shard, a cost no real object store charges, which made
byte-range reading look 5-10x dearer per request than it is. `RangedGets` serves a single
`Range: bytes=a-b` GET of an existing object (plain or through a presigned URL) from the
object's own file instead, sent by the kernel (os.sendfile), on a connection kept open
for the client's next request as a real store keeps it (werkzeug closes each one:
`KeepAliveHandler`); everything else (missing objects, listings, writes) is moto's.
tests/support/test_s3_server.py shows moto's whole-object read, checks the two paths return the
same bytes and headers, and that connections stay open.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

CONTROL = "/_jaxload/"


RANGE = re.compile(r"bytes=(\d+)-(\d+)")
# Query parameters of a presigned GET URL (SigV2; SigV4's all start with X-Amz-).
SIGNED_URL_PARAMS = frozenset({"AWSAccessKeyId", "Signature", "Expires", "x-amz-security-token"})


class RangedGets:
    """WSGI middleware: single-range GETs of existing objects served by reading only the
    range from moto's object buffer (see the module docstring); the rest goes to `app`."""

    def __init__(self, app: Any):
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        self.app = app
        self.backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def __call__(self, environ: dict, start_response: Any) -> Any:
        found = self.find(environ)
        if found is None:
            return self.app(environ, start_response)
        start_response("206 Partial Content", self.headers(*found))
        return _send_file(environ["werkzeug.socket"], *self.body(*found))

    def find(self, environ: dict) -> tuple[Any, int, int] | None:
        """(moto's key, first byte, last byte) of a single-range GET (plain or through a
        presigned URL) of an existing object that the range starts in, else None."""
        match = RANGE.fullmatch(environ.get("HTTP_RANGE", ""))
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        presigned = all(name in SIGNED_URL_PARAMS or name.startswith("X-Amz-") for name in query)
        if environ["REQUEST_METHOD"] != "GET" or not presigned or not match:
            return None
        bucket, _, name = environ.get("PATH_INFO", "").lstrip("/").partition("/")
        try:
            key = self.backend.get_object(bucket, urllib.parse.unquote(name))
        except Exception:  # no such bucket: moto answers
            return None
        begin, end = int(match[1]), int(match[2])
        if key is None or begin >= key.size or end < begin:
            return None  # moto answers 404 / 416 / the whole object
        return key, begin, min(end, key.size - 1)

    @staticmethod
    def headers(key: Any, begin: int, end: int) -> list[tuple[str, str]]:
        return [
            ("ETag", key.etag),
            ("Last-Modified", key.last_modified_RFC1123),
            ("Accept-Ranges", "bytes"),
            ("Content-Range", f"bytes {begin}-{end}/{key.size}"),
            ("Content-Length", str(end - begin + 1)),
            ("Content-Type", "binary/octet-stream"),
        ]

    @staticmethod
    def body(key: Any, begin: int, end: int) -> tuple[int, int, int]:
        """(file descriptor, offset, count) of the range in the object's file."""
        with key.lock:
            source = key._value_buffer.fileno()  # a SpooledTemporaryFile: now a file
        return source, begin, end - begin + 1


def _send_file(sock: socket.socket, source: int, offset: int, count: int) -> Any:
    """The body of a range, sent by the kernel from the object's file (os.sendfile) once
    werkzeug has sent the headers (its write(b"") sends them): a real store's CPU is not
    on the client's machine, so the stand-in spends as little there as it can (a copy
    into Python and a write cost 0.4 ms per MB, on the cores the benchmark's loader uses)."""
    yield b""
    _send_range(sock, source, offset, count)


def _send_range(sock: socket.socket, source: int, offset: int, count: int) -> None:
    while count > 0:
        sent = os.sendfile(sock.fileno(), source, offset, count)
        if not sent:
            raise ConnectionError("the client went away")
        offset, count = offset + sent, count - sent


FAULT_BODY = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
    b"<Message>injected fault</Message></Error>"
)


class FaultLayer:
    """WSGI middleware: sleeps `latency_s` per request, fails matching requests, counts."""

    def __init__(self, app: Any, latency_s: float = 0.0):
        self.app = app
        self.settings: dict[str, Any] = {"latency_s": latency_s, "fail": None}
        self.requests = 0
        self.bytes = 0
        self.failed = 0  # requests answered with an injected fault
        self.lock = threading.Lock()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path.startswith(CONTROL):
            return self._control(path[len(CONTROL) :], environ, start_response)
        status = self._admit(path)
        if status is not None:
            start_response(f"{status} Injected", [("Content-Type", "application/xml")])
            if environ["REQUEST_METHOD"] == "HEAD":
                return [b""]  # a body after a HEAD's headers breaks the client's next read
            return [FAULT_BODY]

        def counted(status: str, headers: list, exc_info: Any = None) -> Any:
            length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
            if environ["REQUEST_METHOD"] != "HEAD":
                with self.lock:
                    self.bytes += length
            return start_response(status, headers, exc_info)

        return self.app(environ, counted)

    def _admit(self, path: str) -> int | None:
        """Waits the latency and counts a request; the status of a fault injected into
        it, or None."""
        time.sleep(float(self.settings["latency_s"]))
        fail = self.settings.get("fail")
        with self.lock:
            self.requests += 1
            if fail and fail["count"] > 0 and fail["match"] in path:
                fail["count"] -= 1
                self.failed += 1
                return int(fail["status"])
        return None

    def serve_kept_alive(self, handler: Any) -> bool:
        """Answers on `handler`'s connection, and keeps it open for the next request, a
        GET that `RangedGets` serves (faults and latency as for any request); False for
        any other request, which werkzeug then answers through the WSGI app, closing the
        connection (see `KeepAliveHandler`)."""
        environ = handler.make_environ()
        found = self.app.find(environ) if isinstance(self.app, RangedGets) else None
        if found is None or environ["PATH_INFO"].startswith(CONTROL):
            return False
        status = self._admit(environ["PATH_INFO"])
        if status is not None:
            handler.send_response(status, "Injected")
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(FAULT_BODY)))
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.wfile.write(FAULT_BODY)
            handler.close_connection = True
            return True
        handler.send_response(206, "Partial Content")
        for name, value in self.app.headers(*found):
            handler.send_header(name, value)
        handler.end_headers()
        _, begin, end = found
        with self.lock:
            self.bytes += end - begin + 1
        _send_range(handler.connection, *self.app.body(*found))
        return True

    def _control(self, what: str, environ: dict, start_response: Any) -> list[bytes]:
        if what == "set":
            size = int(environ.get("CONTENT_LENGTH") or 0)
            self.settings.update(json.loads(environ["wsgi.input"].read(size)))
            body = b"{}"
        elif what == "counters":
            with self.lock:
                counts = {"requests": self.requests, "bytes": self.bytes, "failed": self.failed}
                body = json.dumps(counts).encode()
        elif what == "reset":
            with self.lock:
                self.requests = self.bytes = self.failed = 0
            body = b"{}"
        else:
            start_response("404 Not Found", [])
            return [b""]
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]


def _keep_alive_handler() -> type:
    from werkzeug.serving import WSGIRequestHandler

    class KeepAliveHandler(WSGIRequestHandler):
        """werkzeug's request handler, except that the ranged GETs `RangedGets` serves
        keep their connection open for the client's next request (HTTP/1.1 keep-alive),
        as real stores do. werkzeug closes every connection (http.server cannot drain a
        request body before reading the next request line; these GETs have none), so
        each request cost a new TCP connection and a new server thread, on the
        benchmark's cores: a 5 KB range took 1.0 ms of the machine's CPU (client and
        server) instead of 0.6, a 4 MB one 3.7 instead of 2.3 (600 and 200 presigned
        GETs, /proc/stat)."""

        def setup(self) -> None:
            super().setup()
            # The headers and the sendfile'd body go out as two writes: with Nagle's
            # algorithm the body of a small range waited for the client's delayed ACK
            # (40 ms) on a kept-alive connection.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            if not self.server.app.serve_kept_alive(self):
                self.run_wsgi()

    return KeepAliveHandler


def serve(port: int, latency_s: float) -> None:
    """Runs the server in this process until killed."""
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = FaultLayer(RangedGets(DomainDispatcherApplication(create_backend_app)), latency_s)
    handler = _keep_alive_handler()
    make_server("127.0.0.1", port, app, threaded=True, request_handler=handler).serve_forever()


class S3Server:
    """A moto S3 server subprocess with latency and faults (see the module docstring)."""

    def __init__(self, process: subprocess.Popen, port: int):
        self.process, self.port = process, port
        self.endpoint = f"http://127.0.0.1:{port}"

    @classmethod
    def start(cls, latency_s: float = 0.0) -> S3Server:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(
            os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.s3_server", str(port), str(latency_s)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        server = cls(process, port)
        deadline = time.monotonic() + 60
        while True:
            try:
                server.counters()
                return server
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    server.stop()
                    raise RuntimeError("the S3 test server did not start") from None
                time.sleep(0.1)

    def _call(self, what: str, payload: dict | None = None) -> dict:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(f"{self.endpoint}{CONTROL}{what}", data=data)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def set(self, **settings: Any) -> None:
        """Changes `latency_s` and/or `fail` ({"match", "status", "count"} or None)."""
        self._call("set", settings)

    def counters(self) -> dict[str, int]:
        return self._call("counters")

    def reset_counters(self) -> None:
        self._call("reset")

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options for this server (also usable as `storage_options=`)."""
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        }

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options())

    def create_bucket(self, bucket: str) -> None:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)

    def upload(self, local: str, url: str) -> None:
        """Copies a local directory tree to `url` (s3://bucket/prefix), creating the bucket."""
        fs = self.filesystem()
        self.create_bucket(url.removeprefix("s3://").split("/")[0])
        for dirpath, _, files in os.walk(local):
            for name in files:
                path = os.path.join(dirpath, name)
                fs.put_file(path, f"{url}/{os.path.relpath(path, local)}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]))
