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

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.errors import DatasetError
from jaxload.format import layout
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


def read_parquet(where: Where, relative: str, columns: Sequence[str] | None = None) -> Any:
    """The metadata parquet file at `relative` as a pyarrow Table; a DatasetError naming it
    when it is missing or unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    storage = as_storage(where)
    path = storage.where(relative)
    data = storage.read(relative)
    if data is None:
        raise DatasetError(f"{path}: missing; is {storage.name} a jaxload dataset?")
    try:
        return pq.read_table(
            pa.py_buffer(data), columns=list(columns) if columns is not None else None
        )
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DatasetError(f"{path}: unreadable parquet ({e})") from e


def read_tasks(where: Where) -> dict[int, str]:
    """task_index -> task string (meta/tasks.parquet)."""
    table = read_parquet(where, layout.TASKS_PATH, ["task_index", "task"])
    return dict(zip(table["task_index"].to_pylist(), table["task"].to_pylist(), strict=True))


@dataclasses.dataclass(frozen=True)
class Episodes:
    """meta/episodes.parquet as numpy columns, one row per episode in source order.

    `record_start[cam]` is the record of the camera's init segment in the episode's shard;
    its GOP records follow (`layout.segment_record`). `segment_starts[cam][row]` is the
    first frame of each GOP.
    """

    root: str
    index: np.ndarray  # episode_index
    length: np.ndarray
    shard: np.ndarray
    frames_record_start: np.ndarray
    tasks: list[list[str]]
    record_start: dict[str, np.ndarray]
    segment_starts: dict[str, list[np.ndarray]]
    # string feature -> per episode, the strings its frames' indices point into
    strings: dict[str, list[list[str]]] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.index)

    def take(self, rows: np.ndarray) -> Episodes:
        """The episodes at `rows` (positions in this table), in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        return dataclasses.replace(
            self,
            index=self.index[rows],
            length=self.length[rows],
            shard=self.shard[rows],
            frames_record_start=self.frames_record_start[rows],
            tasks=[self.tasks[r] for r in rows],
            record_start={c: v[rows] for c, v in self.record_start.items()},
            segment_starts={c: [v[r] for r in rows] for c, v in self.segment_starts.items()},
            strings={k: [v[r] for r in rows] for k, v in self.strings.items()},
        )

    def string(self, key: str, row: int, index: int) -> str:
        """The value of string feature `key` whose stored index is `index` in episode `row`."""
        vocabulary = self.strings[key][row]
        if not 0 <= index < len(vocabulary):
            raise DatasetError(
                f"{self.where(row)}: feature {key!r} has string index {index}, but the "
                f"episode has {len(vocabulary)} strings; the dataset is corrupt (reconvert it)"
            )
        return vocabulary[index]

    def where(self, row: int) -> str:
        """Where episode `row` lives, for error messages: its shard file and episode index."""
        path = f"{self.root.rstrip('/')}/{layout.shard_path(int(self.shard[row]))}"
        return f"{path}: episode {int(self.index[row])}"

    def frame_records(self, row: int) -> range:
        """Record numbers of episode `row`'s frame blocks in its shard."""
        start = int(self.frames_record_start[row])
        return range(start, start + layout.num_blocks(int(self.length[row])))

    def camera_records(self, row: int, camera: str) -> range:
        """Record numbers of a camera's init segment and GOPs for episode `row`."""
        start = int(self.record_start[camera][row])
        count = layout.camera_record_count(len(self.segment_starts[camera][row]))
        return range(start, start + count)

    def locate(self, shard: int, record: int) -> str:
        """What record `record` of shard `shard` holds, for error messages."""
        for row in np.flatnonzero(self.shard == shard):
            episode = f"episode {int(self.index[row])}"
            blocks = self.frame_records(row)
            if record in blocks:
                first = (record - blocks.start) * layout.FRAMES_PER_BLOCK
                last = min(first + layout.FRAMES_PER_BLOCK, int(self.length[row])) - 1
                return f"{episode}, frames {first}..{last} (tabular block)"
            for cam in self.record_start:
                run = self.camera_records(row, cam)
                if record in run:
                    if record == run.start:
                        return f"{episode}, camera {cam}, init segment"
                    gop = record - run.start - 1
                    starts = self.segment_starts[cam][row]
                    end = starts[gop + 1] if gop + 1 < len(starts) else int(self.length[row])
                    return f"{episode}, camera {cam}, frames {int(starts[gop])}..{int(end) - 1}"
        return "no episode's record"

    def records_end(self, row: int) -> int:
        """One past the last record episode `row` uses in its shard."""
        ends = [self.frame_records(row).stop]
        ends += [self.camera_records(row, c).stop for c in self.record_start]
        return max(ends)


def read_episodes(where: Where, info: DatasetInfo) -> Episodes:
    """meta/episodes.parquet of the dataset at `root`, checked against its info.json.

    A table that contradicts info.json (episode or frame totals, a length < 1, a shard out
    of range, repeated episode indices, GOP tables that do not start at frame 0 and rise
    within the episode) raises a DatasetError naming the file: a corrupt table must not
    shift which frames are served.
    """
    storage = as_storage(where)
    path = storage.where(layout.EPISODES_PATH)
    table = read_parquet(storage, layout.EPISODES_PATH)
    strings = [k for k, f in info.features.items() if f.is_string]
    wanted = [*episode_columns(info.cameras), *map(layout.strings_column, strings)]
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise DatasetError(f"{path}: columns {missing} missing")

    def ints(name: str) -> np.ndarray:
        return table[name].to_numpy(zero_copy_only=False).astype(np.int64)

    episodes = Episodes(
        root=storage.name,
        index=ints("episode_index"),
        length=ints("length"),
        shard=ints("shard"),
        frames_record_start=ints("frames_record_start"),
        tasks=[list(t or ()) for t in table["tasks"].to_pylist()],
        record_start={c: ints(layout.segment_column(c, "record_start")) for c in info.cameras},
        segment_starts={
            c: [
                np.asarray(s, dtype=np.int64)
                for s in table[layout.segment_column(c, "segment_starts")].to_pylist()
            ]
            for c in info.cameras
        },
        strings={
            k: [list(v or ()) for v in table[layout.strings_column(k)].to_pylist()] for k in strings
        },
    )
    _check_episodes(path, episodes, info)
    return episodes


def _check_episodes(path: str, episodes: Episodes, info: DatasetInfo) -> None:
    def bad(message: str) -> DatasetError:
        return DatasetError(f"{path}: {message}; the table is corrupt (reconvert the dataset)")

    n, lengths = len(episodes), episodes.length
    if n != info.total_episodes or int(lengths.sum()) != info.total_frames:
        raise bad(
            f"{n} episodes / {int(lengths.sum())} frames, but {layout.INFO_PATH} says "
            f"{info.total_episodes} / {info.total_frames}"
        )
    for name, values, low, high in (
        ("length", lengths, 1, None),
        ("shard", episodes.shard, 0, info.num_shards - 1),
        ("frames_record_start", episodes.frames_record_start, 0, None),
        *(
            (f"{layout.segment_column(c, 'record_start')}", v, 0, None)
            for c, v in episodes.record_start.items()
        ),
    ):
        out = (values < low) | (values > high if high is not None else False)
        if out.any():
            row = int(np.flatnonzero(out)[0])
            raise bad(f"episode {int(episodes.index[row])} has {name} {int(values[row])}")
    if len(np.unique(episodes.index)) != n:
        raise bad("an episode_index appears twice")
    for cam, per_episode in episodes.segment_starts.items():
        for row, starts in enumerate(per_episode):
            if not (
                len(starts)
                and starts[0] == 0
                and np.all(np.diff(starts) > 0)
                and starts[-1] < lengths[row]
            ):
                raise bad(
                    f"episode {int(episodes.index[row])}, camera {cam}: GOP starts "
                    f"{starts.tolist()[:8]} do not tile its {int(lengths[row])} frames"
                )
    _check_record_layout(episodes, info, bad)


def _check_record_layout(episodes: Episodes, info: DatasetInfo, bad) -> None:
    """Each episode's records (frame blocks, then per camera in key order its init segment
    and GOPs) follow each other without gap or overlap, episodes tile their shard from
    record 0, and each shard ends where info.json's record count says (format 3)."""
    ends = episodes.frames_record_start + -(-episodes.length // layout.FRAMES_PER_BLOCK)
    for cam in sorted(episodes.record_start):
        starts = episodes.record_start[cam]
        wrong = np.flatnonzero(starts != ends)
        if wrong.size:
            row = int(wrong[0])
            raise bad(
                f"episode {int(episodes.index[row])}, camera {cam}: records start at "
                f"{int(starts[row])}, expected {int(ends[row])} (right after the previous ones)"
            )
        ends = starts + 1 + np.array([len(g) for g in episodes.segment_starts[cam]], np.int64)
    order = np.lexsort((episodes.frames_record_start, episodes.shard))
    shard, first, last = episodes.shard[order], episodes.frames_record_start[order], ends[order]
    opens_shard = np.r_[True, shard[1:] != shard[:-1]]
    expected = np.where(opens_shard, 0, np.r_[0, last[:-1]])
    wrong = np.flatnonzero(first != expected)
    if wrong.size:
        row = order[wrong[0]]
        raise bad(
            f"episode {int(episodes.index[row])} starts at record {int(first[wrong[0]])} of "
            f"shard {int(shard[wrong[0]])}, expected {int(expected[wrong[0]])}"
        )
    if info.shard_records:
        closes_shard = np.r_[shard[1:] != shard[:-1], True]
        counts = np.asarray(info.shard_records, np.int64)
        for s, end in zip(shard[closes_shard], last[closes_shard], strict=True):
            if end != counts[s]:
                raise bad(
                    f"shard {int(s)}'s episodes end at record {int(end)}, but "
                    f"{layout.INFO_PATH} says it holds {int(counts[s])}"
                )


def episode_columns(cameras: Sequence[str] | Mapping[str, Any]) -> list[str]:
    """The columns of meta/episodes.parquet for these cameras (what the reader needs)."""
    columns = ["episode_index", "length", "tasks", "shard", "frames_record_start"]
    for cam in cameras:
        columns += [
            layout.segment_column(cam, "record_start"),
            layout.segment_column(cam, "segment_starts"),
        ]
    return columns


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
        self.episodes = read_episodes(self.storage, self.info)
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
        starts = self.episodes.segment_starts[camera][row]
        end = starts[segment + 1] if segment + 1 < len(starts) else self.episodes.length[row]
        return int(end - starts[segment])
