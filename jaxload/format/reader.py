"""Reading a jaxload dataset: its metadata tables and its shards, checked as they load.

Every part of jaxload that reads a converted dataset (the map-style dataset, doctor, stats,
speed buckets, autotune probes, the converter's final assembly) goes through this module,
so a change of the on-disk layout (`jaxload.format.layout`) touches one reader. It reads
through a `jaxload.format.storage.DatasetStorage`: a local directory, or an object store
(`jaxload.storage.open_storage(url)`), where the files live.

    files = DatasetFiles("out/demo")                 # or DatasetFiles(open_storage(url))
    files.info.fps, len(files.episodes)
    for frames in files.iter_frames():        # structured arrays of frame rows, in order
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
from jaxload.format.probe import check_first_records
from jaxload.format.storage import DatasetStorage, as_storage

# Frame-block records per read when streaming every frame (stats): few calls, bounded memory
# (a pass over 100k one-block episodes: 1.24 s with 64, 0.58 s with 512; blocks are a few KB).
READ_BLOCKS = 512

Where = str | os.PathLike | DatasetStorage  # a dataset's directory, or its storage


def read_info(where: Where) -> DatasetInfo:
    """meta/info.json of the dataset at `where`, loaded and validated."""
    storage = as_storage(where)
    if storage.local_path is not None and not os.path.isdir(storage.local_path):
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
        check_records: check info.json against the first episode's records at open, for
            a local dataset (`jaxload.format.probe`; `jaxload doctor` checks every record).

    Example:
        >>> files = DatasetFiles("out/demo")
        >>> files.info.fps, len(files.episodes), files.storage.name
        (10, 4, 'out/demo')
    """

    def __init__(self, where: Where, *, check_records: bool = True):
        self.storage = as_storage(where)
        self.root = self.storage.name  # the directory or URL messages name
        self.info = read_info(self.storage)
        self.episodes = load_episodes(self.storage, self.info)
        self.readers = self.storage.record_reader(self.info, self.episodes.locate)
        if check_records and self.storage.local_path is not None:
            # info.json against the records it describes (a remote dataset's records are
            # verified as they are fetched: no request at open)
            check_first_records(self)

    def tasks(self) -> dict[int, str]:
        return read_tasks(self.storage)

    def iter_frames(
        self, rows: Sequence[int] | None = None, *, blocks_per_read: int = READ_BLOCKS
    ) -> Iterator[np.ndarray]:
        """The frame rows of every episode (or of `rows`) in order, in structured arrays of
        at most `blocks_per_read` frame blocks, each episode's checked to be whole frames
        and exactly its length.

        Each array is one read of consecutive records (several short episodes per read
        where their blocks follow each other, as in a tabular dataset): the reads cost time
        linear in the records, whatever the number of episodes or the size of the shards."""
        ep, seen = self.episodes, 0
        run: list[tuple[int, int, bool]] = []  # (row, blocks, ends its episode) per piece
        shard = first = end = -1

        def read_run() -> np.ndarray | None:
            nonlocal seen
            if not run:
                return None
            dtype = self.info.frame_dtype
            data = self.readers.read(shard, range(first, end))
            at = 0
            for row, count, last in run:
                size = sum(len(r) for r in data[at : at + count])
                at += count
                if size % dtype.itemsize:
                    raise DatasetError(
                        f"{ep.where(row)}: frame records of {size} bytes do not hold whole "
                        f"rows of {dtype.itemsize} bytes"
                    )
                seen += size // dtype.itemsize
                if last and seen != int(ep.length[row]):
                    raise DatasetError(
                        f"{ep.where(row)}: {seen} frame rows for length {ep.length[row]}"
                    )
                seen = 0 if last else seen
            return np.frombuffer(b"".join(data), dtype=dtype)

        try:
            for row in range(len(ep)) if rows is None else rows:
                blocks = ep.frame_records(row)
                for start in range(blocks.start, blocks.stop, blocks_per_read):
                    count = min(blocks_per_read, blocks.stop - start)
                    if (
                        ep.shard[row] != shard
                        or start != end
                        or end + count > first + blocks_per_read
                    ):
                        if (frames := read_run()) is not None:
                            yield frames
                        shard, first, end, run = int(ep.shard[row]), start, start, []
                    run.append((row, count, start + count == blocks.stop))
                    end += count
            if (frames := read_run()) is not None:
                yield frames
        finally:
            self.readers.close()

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
