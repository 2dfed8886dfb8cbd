"""Where each record of a remote dataset lies: the record offset index beside each shard
(`layout.offsets_path`), fetched once per shard and checked against info.json, and the
check that the dataset in storage is still the version that was opened.

    index = OffsetIndex(transport, info)
    index.load([0, 3])                        # fetches the shards' indexes, concurrently
    start, end = index.of(0)[17], index.of(0)[18]
    phases, sizes = index.place(keys)         # where records lie in the dataset's bytes
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import math
from collections.abc import Callable, Iterable

import numpy as np

from jaxload.errors import CorruptRecordError, DatasetChangedError
from jaxload.format import chunks, layout
from jaxload.format.layout import DatasetInfo
from jaxload.storage.transport import Transport
from jaxload.storage.urls import join


class OffsetIndex:
    """The loaded offset indexes of one remote dataset's shards (one per process)."""

    def __init__(self, transport: Transport, info: DatasetInfo):
        self.transport, self.info = transport, info
        self._offsets: dict[int, np.ndarray] = {}
        self.version_checked = False
        self._sized = (0, 0)  # (shards whose offsets are loaded, their bytes): dataset_bytes

    def __contains__(self, shard: int) -> bool:
        return shard in self._offsets

    def of(self, shard: int) -> np.ndarray:
        """Shard `shard`'s offsets (loaded: `load` or `fetch` first)."""
        return self._offsets[shard]

    def check_version(self) -> None:
        """DatasetChangedError when info.json at the URL is no longer the opened dataset."""
        raw = json.loads(self.transport.get(layout.INFO_PATH))
        now = str(raw.get("fingerprint") if isinstance(raw, dict) else raw)
        if now != self.info.fingerprint:
            url = self.transport.url
            raise DatasetChangedError(
                f"{url}: the dataset in storage is another version than the one opened "
                f"(fingerprint {now[:12]}..., opened {self.info.fingerprint[:12]}...); reopen "
                "it (and start a new run: a checkpoint of this one cannot resume there)"
            )
        self.version_checked = True

    def fetch(self, shard: int) -> np.ndarray:
        """Shard `shard`'s record offsets (fetched once, checked against info.json)."""
        found = self._offsets.get(shard)
        if found is not None:
            return found
        from xxhash import xxh3_64_hexdigest

        if not self.version_checked:
            self.check_version()
        relative = layout.offsets_path(shard)
        data = self.transport.get(relative)
        expected_count = self.info.shard_records[shard] + 1
        if (
            xxh3_64_hexdigest(data) != self.info.offsets_xxh3[shard]
            or len(data) != expected_count * chunks.OFFSET_DTYPE.itemsize
        ):
            raise CorruptRecordError(
                f"{join(self.transport.url, relative)}: does not match its checksum in "
                f"{layout.INFO_PATH}; the dataset in storage is damaged (upload it again)"
            )
        offsets = np.frombuffer(data, chunks.OFFSET_DTYPE).astype(np.int64)
        self._offsets[shard] = offsets
        return offsets

    def load(self, shards: Iterable[int], pool: Callable[[], cf.Executor]) -> None:
        """Fetches the offset indexes of `shards` not loaded yet, concurrently on `pool()`."""
        if len(self._offsets) == self.info.num_shards:
            return  # all loaded: the usual case, once per batch
        missing = sorted({int(s) for s in shards} - self._offsets.keys())
        if not missing:
            return
        if not self.version_checked:
            self.check_version()
        for future in [pool().submit(self.fetch, s) for s in missing]:
            future.result()

    @property
    def loaded(self) -> dict[int, np.ndarray]:
        return self._offsets

    def dataset_bytes(self) -> float:
        """The bytes of the dataset's shards: those whose offsets are loaded, the others
        taken as their mean (summed again only when more shards are loaded: this runs
        once per batch, and a large dataset has thousands of shards)."""
        loaded = list(self._offsets.values())
        if len(loaded) != self._sized[0]:
            self._sized = (len(loaded), sum(int(o[-1]) for o in loaded))
        count, total = self._sized
        return self.info.num_shards * total / count if count else math.inf

    def place(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For (shard, record) rows `keys` (offsets loaded): where each record lies in the
        dataset's bytes, 0..1 (shards in order), and its size in bytes."""
        phases = np.empty(len(keys))
        sizes = np.empty(len(keys), np.int64)
        for shard in np.unique(keys[:, 0]).tolist():
            rows = np.flatnonzero(keys[:, 0] == shard)
            offsets = self._offsets[shard]
            begin = offsets[keys[rows, 1]]
            sizes[rows] = offsets[keys[rows, 1] + 1] - begin
            phases[rows] = (shard + begin / max(1, int(offsets[-1]))) / self.info.num_shards
        return phases, sizes
