"""The records of one range request while it is in flight.

Readers that need a record being fetched wait on its request's `Flight`; the fetch thread
finishes it once, with the payloads it verified and, if the request or a check failed,
the error the others raise. One object per request, not one per record: a
`concurrent.futures.Future` per record (a Condition and an RLock each, a notify each)
cost about 1 ms of GIL-held time per batch at 65 records a batch, time the decoders
waited for.

    flight = Flight()                         # registered for each of its records
    flight.finish({key: payload})             # the fetch thread, once
    payload = flight.result(key, timeout=5)   # a reader
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping

_FINISH = threading.Lock()  # the first finish wins: a fetch and a restart() may race


class Flight:
    __slots__ = ("_done", "_error", "_payloads")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._payloads: Mapping[Hashable, bytes] = {}
        self._error: BaseException | None = None

    @classmethod
    def landed(cls, key: Hashable, payload: bytes) -> Flight:
        """A flight already finished with `payload` for `key`."""
        flight = cls()
        flight.finish({key: payload})
        return flight

    def finish(
        self, payloads: Mapping[Hashable, bytes], error: BaseException | None = None
    ) -> None:
        """Ends the flight: `payloads` for the records verified, `error` for the others.
        Only the first call counts."""
        with _FINISH:
            if self._done.is_set():
                return
            self._payloads, self._error = payloads, error
            self._done.set()

    def result(self, key: Hashable, timeout: float | None = None) -> bytes:
        """The payload of `key` once the flight has ended, or its error."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"record {key} still in flight after {timeout} s")
        payload = self._payloads.get(key)
        if payload is None:
            raise self._error or LookupError(f"record {key} was not in this request")
        return payload


__all__ = ["Flight"]
