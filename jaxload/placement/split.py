"""Hybrid decoding: the readers (CPU, in the Grain workers) decode a share of each device's
rows of a batch, the devices (NVDEC) the rest, in a share the training process adjusts as
it runs so that neither side waits for the other.

Which rows: of the rows each device holds (its block of this host's rows), the first
`round(share * len(block))` are decoded by the readers. Every row is decoded exactly once,
by one side or the other, so the batch holds the same frames as with either side alone
(bit for bit where both decode alike: on CPU devices; NVDEC's frames are within a few
levels of the CPU's).

The share lives in a shared-memory cell that the training process writes and the
readers' processes map (`DecodeSplit`); `SplitBalance` moves it: while the prefetch thread
still waits for the readers, they get fewer rows; while it never waits and the devices
decode, they get more; in steps that halve at each change of direction (a bisection of
[0, 1] that keeps following as the load moves).

    split = DecodeSplit(device_blocks=[np.arange(0, 4), np.arange(4, 8)], share=0.5)
    split.cpu_rows(split.share)              # readers: array([0, 1, 4, 5])
    balance = SplitBalance(split)
    balance.readers_waited(0.030)            # the prefetch thread waited this for a batch
    balance.devices_decoded(0.010, 0.5)      # the devices took this for a batch read at 0.5
                                             # (every WINDOW batches, the share moves: here
                                             # the readers get fewer rows)
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxload.workers.shared_batch import SHM_DIR, segment_prefix

log = logging.getLogger("jaxload.placement.split")

# The readers' share when a loader starts; the steps (SplitBalance) start at FIRST_STEP,
# halve at each change of direction down to MIN_STEP, double after STEADY moves one way.
INITIAL_SHARE = 0.5
FIRST_STEP, MIN_STEP, STEADY = 0.25, 1 / 64, 3
# Batches averaged per move; the readers are "behind" when the prefetch thread waited for
# them more than MARGIN of the devices' decode time (and more than MIN_WAIT_S).
WINDOW, MARGIN, MIN_WAIT_S = 4, 0.10, 0.0005


class DecodeSplit:
    """The readers' share of each device's rows, in a cell the training process writes and
    worker processes read (a float64 in /dev/shm, named like the shared-memory slots so
    that a crashed trainer's cell is reclaimed the same way). Picklable: a worker maps it
    by name."""

    def __init__(self, device_blocks: Sequence[Sequence[int]], share: float = 0.5):
        self.blocks = [np.asarray(b, dtype=np.int64) for b in device_blocks]
        self.path = os.path.join(SHM_DIR, segment_prefix() + secrets.token_hex(4))
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, 8)
            self._map = mmap.mmap(fd, 8)
        finally:
            os.close(fd)
        self._owner = True
        self.share = share

    def __getstate__(self) -> dict[str, Any]:
        return {"blocks": self.blocks, "path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._owner, self._map = False, None

    def _cell(self) -> mmap.mmap:
        if self._map is None:  # a worker: map the trainer's cell (read only)
            fd = os.open(self.path, os.O_RDONLY)
            try:
                self._map = mmap.mmap(fd, 8, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        return self._map

    @property
    def share(self) -> float:
        """The readers' share of each device's rows, 0..1."""
        return float(np.frombuffer(self._cell(), np.float64, 1)[0])

    @share.setter
    def share(self, value: float) -> None:
        if not self._owner:
            raise RuntimeError("only the training process sets the decode split")
        np.frombuffer(self._map, np.float64, 1)[0] = min(1.0, max(0.0, float(value)))

    def cpu_rows(self, share: float) -> np.ndarray:
        """This host's batch rows the readers decode at `share`: the first part of each
        device's block, sorted."""
        parts = [b[: round(share * len(b))] for b in self.blocks]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def close(self) -> None:
        """The training process removes the cell's name (mappings keep it alive)."""
        if self._owner:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


class SplitBalance:
    """Moves the split toward where neither side waits for the other.

    The prefetch thread alternates between waiting for the readers' next batch and
    decoding the devices' rows of it; the readers work meanwhile, ahead into their
    buffers. Averaged over WINDOW batches: when the prefetch thread still waits for the
    readers (more than MARGIN of the devices' decode time), the readers are the slower
    side and get fewer rows; when it never waits while the devices decode, the readers
    have time to spare and get more. The steps halve at each change of direction (down to
    MIN_STEP) and double again after STEADY moves the same way, so the split settles and
    still follows a load that moves.
    """

    def __init__(self, split: DecodeSplit):
        self.split = split
        self.step = FIRST_STEP
        self._direction = 0  # +1: the readers took more rows last time, -1: fewer
        self._same = 0  # moves in a row in that direction
        self._said = -1.0
        self._waited = 0.0  # the prefetch thread's wait for the readers' last batch
        self._window: list[tuple[float, float]] = []

    def readers_waited(self, seconds: float) -> None:
        """The prefetch thread waited `seconds` for the readers' batch (it decodes next)."""
        self._waited = seconds

    def devices_decoded(self, seconds: float, read_at: float) -> float:
        """The devices decoded that batch, which the readers read at share `read_at`, in
        `seconds`; every WINDOW batches read at the current share, the split moves
        (`update`; batches the readers read ahead before a move say nothing of it).
        Returns the share."""
        if read_at != self.split.share:
            return self.split.share
        self._window.append((self._waited, seconds))
        if len(self._window) < WINDOW:
            return self.split.share
        waits, decodes = zip(*self._window, strict=True)
        self._window.clear()
        return self.update(sum(waits) / len(waits), sum(decodes) / len(decodes))

    def update(self, reader_wait_s: float, device_decode_s: float) -> float:
        """With the prefetch thread waiting `reader_wait_s` per batch for the readers and
        the devices decoding for `device_decode_s`: the new share."""
        share = self.split.share
        slack = max(MIN_WAIT_S, MARGIN * device_decode_s)
        if reader_wait_s > slack and share > 0:
            direction = -1  # the readers are the slower side: give the devices more rows
        elif reader_wait_s <= slack and device_decode_s > MIN_WAIT_S and share < 1:
            direction = 1  # the readers keep ahead while the devices work: give them more
        else:
            return share
        if self._direction and direction != self._direction:
            self.step, self._same = max(MIN_STEP, self.step / 2), 0
        else:
            self._same += 1
            if self._same >= STEADY:
                self.step, self._same = min(FIRST_STEP, 2 * self.step), 0
        self._direction = direction
        share = min(1.0, max(0.0, share + direction * self.step))
        self.split.share = share
        if abs(share - self._said) >= 0.1 or (share in (0.0, 1.0) and share != self._said):
            self._said = share
            log.info(
                "hybrid decode: the readers (CPU) now decode %.0f%% of each device's rows, "
                "the devices %.0f%%: per batch the training process waited %.1f ms for the "
                "readers' batch, %s %.0f%% of the %.1f ms it then decoded on the devices, "
                "so the %s",
                100 * share,
                100 * (1 - share),
                1e3 * reader_wait_s,
                "over" if direction < 0 else "within",
                100 * MARGIN,
                1e3 * device_decode_s,
                "readers were the slower side" if direction < 0 else "readers kept ahead",
            )
        return share
