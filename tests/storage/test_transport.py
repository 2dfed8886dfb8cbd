"""How a remote dataset's bytes are fetched (jaxload.storage.transport.Transport): objects
and ranges, retried and counted, the estimates that size requests, and the retry warnings
of an outage kept to one per period.

Faked: the network only (`serve_locally`, tests/support/remote_fakes.py: the s3:// URL
reads a converted directory through fsspec's local filesystem); one test makes the first
request of a range fail as a reset connection would."""

from __future__ import annotations

import errno
import logging
import pickle

import pytest

from jaxload.errors import DatasetError, RemoteError
from jaxload.format import layout
from jaxload.storage import transport as transport_module
from jaxload.storage.options import RemoteOptions
from jaxload.storage.retry import MISSING, RetryPolicy
from jaxload.storage.transport import Transport
from tests.support.remote_fakes import serve_locally

URL = "s3://local/ds"
NO_WAIT = RetryPolicy(attempts=3, base_delay=0.0, sleep=lambda _: None)


@pytest.fixture
def transport(monkeypatch, small_converted):
    serve_locally(monkeypatch, URL, small_converted)
    return Transport(URL, RemoteOptions(retry=NO_WAIT), {})


def test_objects_and_ranges_are_the_bytes_stored_and_are_counted(transport, small_converted):
    shard = (small_converted / layout.shard_path(0)).read_bytes()
    assert transport.get(layout.shard_path(0)) == shard
    assert transport.get(layout.shard_path(0), 100, 250) == shard[100:250]
    assert transport.kind == "fsspec"  # a local filesystem signs no URLs
    assert transport.counts() == {"requests": 2, "bytes_fetched": len(shard) + 150, "retries": 0}


def test_a_missing_object_is_a_remote_error_naming_it(transport):
    with pytest.raises(RemoteError, match=r"s3://local/ds/data/none") as raised:
        transport.get("data/none")
    assert raised.value.kind == MISSING


class _ResetOnce:
    def __init__(self, inner):
        self.inner, self.calls = inner, 0
        self.kind = inner.kind

    def get(self, relative, start, end):
        self.calls += 1
        if self.calls == 1:
            raise ConnectionResetError(errno.ECONNRESET, "connection reset by peer")
        return self.inner.get(relative, start, end)


def test_a_transient_error_is_retried_and_counted(transport, small_converted):
    transport._ranges = _ResetOnce(transport.ranges())
    assert transport.get(layout.INFO_PATH) == (small_converted / layout.INFO_PATH).read_bytes()
    assert transport.counts()["retries"] == 1 and transport.counts()["requests"] == 1


def test_a_reader_that_gave_up_ends_the_fetch_without_retries(transport):
    transport._ranges = _ResetOnce(transport.ranges())
    with pytest.raises(DatasetError, match=r"^s3://local/ds: closed while fetching meta/info"):
        transport.get(layout.INFO_PATH, closed=lambda: transport._ranges.calls >= 1)
    assert transport._ranges.calls == 1 and transport.counts()["retries"] == 0
    with pytest.raises(DatasetError, match="closed while fetching"):
        transport.get(layout.INFO_PATH, closed=lambda: True)
    assert transport._ranges.calls == 1  # not even tried


def test_a_pickled_transport_opens_its_own_connections_and_counts_afresh(transport):
    transport.options = RemoteOptions()  # NO_WAIT's sleep is a lambda: not picklable
    transport.get(layout.INFO_PATH)
    copy = pickle.loads(pickle.dumps(transport))
    assert copy.url == URL and copy.options == transport.options
    assert copy.kind is None and copy.counts()["requests"] == 0


def test_latency_comes_from_small_requests_and_bandwidth_from_large_ones():
    transport = Transport(URL, RemoteOptions(), {})
    assert (transport.latency_s, transport.bandwidth) == (0.05, 100e6)  # before measuring
    assert transport.coalesce_bytes() == int(0.05 * 100e6)
    transport._measured(0.010, 1000)
    assert transport.latency_s == 0.010 and transport.bandwidth == 100e6
    transport._measured(0.020, 1000)
    assert transport.latency_s == pytest.approx(0.8 * 0.010 + 0.2 * 0.020)
    transport._measured(1.0, 10 << 20)  # 10 MiB in 1 s, less the latency
    assert transport.bandwidth == pytest.approx((10 << 20) / (1.0 - transport.latency_s))
    assert transport.coalesce_bytes() == int(transport.latency_s * transport.bandwidth)
    fast = Transport(URL, RemoteOptions(), {})
    fast._measured(0.0001, 100)
    assert fast.coalesce_bytes() == 64 << 10  # the smallest gap worth spanning
    transport._measured(0.0, 1 << 20)  # no time measured: no bandwidth from it
    assert transport.bandwidth == pytest.approx((10 << 20) / (1.0 - transport.latency_s))
    assert Transport(URL, RemoteOptions(coalesce_bytes=5), {}).coalesce_bytes() == 5
    slow = Transport(URL, RemoteOptions(), {})
    slow._measured(2.0, 100)
    assert slow.coalesce_bytes() == 8 << 20  # the largest


def test_retry_warnings_are_one_per_period_and_say_how_many_were_quiet(monkeypatch, caplog):
    now = [1000.0]
    monkeypatch.setattr(transport_module.time, "monotonic", lambda: now[0])
    transport = Transport(URL, RemoteOptions(), {})
    with caplog.at_level(logging.DEBUG, logger="jaxload.storage"):
        for _ in range(3):
            transport._warn_retry("retrying %s", "a")
        now[0] += transport_module.RETRY_LOG_S
        transport._warn_retry("retrying %s", "b")
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert levels == [
        ("WARNING", "retrying a"),
        ("DEBUG", "retrying a"),
        ("DEBUG", "retrying a"),
        ("WARNING", "retrying b (2 more retries of its requests before this one)"),
    ]
