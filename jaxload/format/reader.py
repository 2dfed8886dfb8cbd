"""Reading a jaxload dataset: its metadata tables and its shards, checked as they load.

Every part of jaxload that reads a converted dataset (the map-style dataset, doctor, stats,
speed buckets, autotune probes, the converter's final assembly) goes through this module,
so a change of the on-disk layout (`jaxload.format.layout`) touches one reader. It reads
through a `jaxload.format.storage.DatasetStorage`: a local directory, or an object store
(`jaxload.storage.open_storage(url)`), where the files live.

    files = DatasetFiles("out/demo")                 # or DatasetFiles(open_storage(url))
    files.info.fps, len(files.episodes)
    for row, frames in files.iter_frame_rows():   # structured arrays, episode by episode
        ...
    init, gop = files.read_gop(row=0, camera="observation.images.top", segment=0)

Errors are `DatasetError`s naming the file (and episode where there is one).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np

from jaxload.errors import DatasetError
from jaxload.format import layout
from jaxload.format.episodes import Episodes, load_episodes, load_tasks
from jaxload.format.layout import DatasetInfo
from jaxload.format.storage import DatasetStorage, LocalDirectory, as_storage

# Frame-block records per read when streaming every frame (stats): few calls, bounded memory.
READ_BLOCKS = 64

Where = str | os.PathLike | DatasetStorage  # a dataset's directory, or its storage


def read_info(where: Where) -> DatasetInfo:
    """meta/info.json of the dataset at `where`, loaded and validated."""
    storage = as_storage(where)
    if isinstance(storage, LocalDirectory) and not storage.is_directory():
        raise DatasetError(f"{storage.name}: no such directory (a jaxload dataset is a directory)")
    data = storage.read(layout.INFO_PATH)
    if data is None:
        raise DatasetError(
            f"{storage.where(layout.INFO_PATH)}: missing; is {storage.name} a jaxload dataset "
            "(`jaxload convert`)?"
        )
    return layout.parse_info(data, storage.where(layout.INFO_PATH), storage.name)


def read_tasks(where: Where) -> dict[int, str]:
    """task_index -> task string (meta/tasks.parquet)."""
    return dict(load_tasks(as_storage(where)))


def read_episodes(where: Where, info: DatasetInfo) -> Episodes:
    """meta/episodes.parquet of the dataset at `where`, checked against its info.json
    (`jaxload.format.episodes.load_episodes`)."""
    return load_episodes(as_storage(where), info)


class DatasetFiles:
    """A converted dataset's metadata and shards: the one reader of the on-disk format.

    Args:
        where: the dataset's directory, or its `DatasetStorage` (a local directory or an
            object store: `jaxload.storage.open_storage`).

    Example:
        >>> files = DatasetFiles("out/demo")
        >>> files.info.fps, len(files.episodes), files.storage.name
        (10, 4, 'out/demo')
    """

    def __init__(self, where: Where):
        self.storage = as_storage(where)
        self.root = self.storage.name  # the directory or URL messages name
        self.info = read_info(self.storage)
        self.episodes = load_episodes(self.storage, self.info)
        self.readers = self.storage.record_reader(self.info, self.episodes.locate)

    def tasks(self) -> dict[int, str]:
        return read_tasks(self.storage)

    def iter_frame_rows(
        self, rows: Sequence[int] | None = None, *, blocks_per_read: int = READ_BLOCKS
    ) -> Iterator[tuple[int, np.ndarray]]:
        """(row, frames) for every episode (or `rows`), `blocks_per_read` frame blocks at
        a time, checked to hold whole frames and exactly the episode's length."""
        try:
            for row in range(len(self.episodes)) if rows is None else rows:
                for frames in self._episode_rows(row, blocks_per_read):
                    yield row, frames
        finally:
            self.readers.close()

    def _episode_rows(self, row: int, blocks_per_read: int) -> Iterator[np.ndarray]:
        dtype, ep = self.info.frame_dtype, self.episodes
        ids, seen = ep.frame_records(row), 0
        for first in range(0, len(ids), blocks_per_read):
            data = b"".join(self.readers.read(int(ep.shard[row]), ids[first:][:blocks_per_read]))
            if len(data) % dtype.itemsize:
                raise DatasetError(
                    f"{ep.where(row)}: frame records of {len(data)} bytes do not hold whole "
                    f"rows of {dtype.itemsize} bytes"
                )
            frames = np.frombuffer(data, dtype=dtype)
            seen += len(frames)
            yield frames
        if seen != int(ep.length[row]):
            raise DatasetError(f"{ep.where(row)}: {seen} frame rows for length {ep.length[row]}")

    def read_gop(self, row: int, camera: str, segment: int) -> tuple[bytes, bytes]:
        """(init segment, GOP record) of `camera`'s GOP number `segment` in episode `row`."""
        first = int(self.episodes.record_start[camera][row])
        init, gop = self.readers.read(
            int(self.episodes.shard[row]), [first, layout.segment_record(first, segment)]
        )
        return init, gop

    def gop_length(self, row: int, camera: str, segment: int) -> int:
        """Frames in GOP `segment` of `camera` in episode `row` (from the segment table)."""
        return self.episodes.segments[camera].frames(row, segment)
