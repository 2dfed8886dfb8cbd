"""The records of one range request while in flight (jaxload.storage.flight): readers
wait for the one finish, get their payload or the request's error."""

from __future__ import annotations

import threading

import pytest

from jaxload.errors import RemoteError
from jaxload.storage.flight import Flight


def test_readers_waiting_on_a_flight_get_their_payload_once_it_lands():
    flight = Flight()
    got = []
    readers = [
        threading.Thread(target=lambda k=k: got.append(flight.result(k, timeout=10)))
        for k in ((0, 1), (0, 2))
    ]
    for reader in readers:
        reader.start()
    flight.finish({(0, 1): b"one", (0, 2): b"two"})
    for reader in readers:
        reader.join(10)
    assert sorted(got) == [b"one", b"two"]
    assert Flight.landed("k", b"x").result("k", timeout=0) == b"x"


def test_a_flight_not_finished_in_time_is_a_timeout_naming_the_record():
    with pytest.raises(TimeoutError, match=r"record \(3, 4\) still in flight after 0\.01 s"):
        Flight().result((3, 4), timeout=0.01)


def test_records_without_a_payload_raise_the_error_of_the_request():
    error = RemoteError("s3://b/ds: request failed", kind="transient")
    flight = Flight()
    flight.finish({"ok": b"1"}, error)
    assert flight.result("ok") == b"1"
    with pytest.raises(RemoteError, match="request failed"):
        flight.result("failed")
    with pytest.raises(LookupError, match="record other was not in this request"):
        Flight.landed("ok", b"1").result("other")


def test_only_the_first_finish_counts():
    flight = Flight()
    flight.finish({"k": b"first"})
    flight.finish({"k": b"second"}, RuntimeError("late"))
    assert flight.result("k") == b"first"
