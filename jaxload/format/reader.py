"""Reading a jaxload dataset: its metadata tables and its shards, checked as they load.

Every part of jaxload that reads a converted dataset (the map-style dataset, doctor, stats,
speed buckets, autotune probes, the converter's final assembly) goes through this module,
so a change of the on-disk layout (`jaxload.format.layout`) touches one reader.

    files = DatasetFiles("out/demo")
    files.info.fps, len(files.episodes)
    for row, frames in files.iter_frame_rows():   # structured arrays, episode by episode
        ...
    init, gop = files.read_gop(row=0, camera="observation.images.top", segment=0)

Errors are `DatasetError`s naming the file (and episode where there is one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxload.errors import CorruptRecordError, DatasetChangedError, DatasetError
from jaxload.format import layout
from jaxload.format.layout import DatasetInfo, read_info

log = logging.getLogger("jaxload.format.reader")

# Frame-block records per read when streaming every frame (stats): few calls, bounded memory.
READ_BLOCKS = 64


def read_parquet(path: str | os.PathLike, columns: Sequence[str] | None = None) -> Any:
    """A metadata parquet file as a pyarrow Table; a DatasetError naming it when it is
    missing or unreadable."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: missing; is {path.parent.parent} a jaxload dataset?")
    try:
        return pq.read_table(path, columns=list(columns) if columns is not None else None)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DatasetError(f"{path}: unreadable parquet ({e})") from e


def read_tasks(root: str | os.PathLike) -> dict[int, str]:
    """task_index -> task string (meta/tasks.parquet)."""
    table = read_parquet(Path(root) / layout.TASKS_PATH, ["task_index", "task"])
    return dict(zip(table["task_index"].to_pylist(), table["task"].to_pylist(), strict=True))


def open_shard(path: str | os.PathLike) -> Any:
    """An ArrayRecordReader over one shard (or a converter part file), with jaxload's
    explicit reader options; a DatasetError naming the file when it is missing or corrupt."""
    from array_record.python.array_record_module import ArrayRecordReader

    if not os.path.isfile(path):
        raise DatasetError(f"{path}: shard file missing")
    try:
        return ArrayRecordReader(str(path), layout.READER_OPTIONS)
    except Exception as e:  # array_record raises RuntimeError/ValueError on corruption
        raise DatasetError(f"{path}: corrupt shard ({e})") from e


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
        path = os.path.join(self.root, layout.shard_path(int(self.shard[row])))
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


def read_episodes(root: str | os.PathLike, info: DatasetInfo) -> Episodes:
    """meta/episodes.parquet of the dataset at `root`, checked against its info.json.

    A table that contradicts info.json (episode or frame totals, a length < 1, a shard out
    of range, repeated episode indices, GOP tables that do not start at frame 0 and rise
    within the episode) raises a DatasetError naming the file: a corrupt table must not
    shift which frames are served.
    """
    path = Path(root) / layout.EPISODES_PATH
    table = read_parquet(path)
    strings = [k for k, f in info.features.items() if f.is_string]
    wanted = [*episode_columns(info.cameras), *map(layout.strings_column, strings)]
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise DatasetError(f"{path}: columns {missing} missing")

    def ints(name: str) -> np.ndarray:
        return table[name].to_numpy(zero_copy_only=False).astype(np.int64)

    episodes = Episodes(
        root=str(root),
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


def _check_episodes(path: Path, episodes: Episodes, info: DatasetInfo) -> None:
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


class ShardReaders:
    """Readers of a dataset's shards, one set per thread (ArrayRecord readers are not
    shared across threads), reopened after pickling (each process opens its own).

    They serve exactly the dataset version that was opened (`info`): a shard is checked
    when a thread first opens it (its record count, and that meta/info.json still holds
    the opened fingerprint), and every record read is checked against its position-keyed
    checksum (format version 3). A mismatch raises `DatasetChangedError` when the dataset
    on disk is another version now, else `CorruptRecordError`; both name the shard and the
    record, and `describe(shard, record)` (e.g. `Episodes.locate`) says what it holds.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        info: DatasetInfo,
        describe: Callable[[int, int], str] | None = None,
    ):
        self.root = str(root)
        self.info = info
        self.describe = describe
        self._local = threading.local()
        if not info.checked:
            _warn_unchecked(self.root, info.format_version)

    def path(self, shard: int) -> str:
        return os.path.join(self.root, layout.shard_path(shard))

    def get(self, shard: int) -> Any:
        readers = self._local.__dict__.setdefault("readers", {})
        if shard not in readers:
            self._check_version()
            reader = open_shard(self.path(shard))
            readers[shard] = reader
            self._check_record_count(shard, reader)
        return readers[shard]

    def read(self, shard: int, records: Sequence[int]) -> list[bytes]:
        """Records of one shard (their payloads, verified), in one batched call."""
        records = [int(r) for r in records]
        try:
            stored = self.get(shard).read(records)
        except DatasetError:
            raise
        except Exception as e:  # array_record: RuntimeError on a bad chunk or an index past the end
            self._check_version()
            raise DatasetError(f"{self.path(shard)}: cannot read records ({e})") from e
        if not self.info.checked:
            return stored
        seed = self.info.record_seed
        payloads = [layout.unseal_record(d, seed, shard, r) for d, r in zip(stored, records)]
        if any(p is None for p in payloads):
            bad = records[next(i for i, p in enumerate(payloads) if p is None)]
            self._check_version()
            where = f" ({self.describe(shard, bad)})" if self.describe else ""
            raise CorruptRecordError(
                f"{self.path(shard)}: record {bad}{where} does not match its checksum: the "
                f"file changed after conversion (dataset {self.root}); reconvert or restore it"
            )
        return payloads

    def _check_version(self) -> None:
        """Raises DatasetChangedError when meta/info.json is no longer the opened one."""
        try:
            now = read_info(self.root).fingerprint
        except DatasetError as e:
            raise DatasetChangedError(
                f"{self.root}: the dataset changed on disk after it was opened ({e})"
            ) from e
        if now != self.info.fingerprint:
            raise DatasetChangedError(
                f"{self.root}: the dataset on disk is another version than the one opened "
                f"(fingerprint {now[:12]}..., opened {self.info.fingerprint[:12]}...); "
                "reopen it (and start a new run: a checkpoint of this one cannot resume there)"
            )

    def _check_record_count(self, shard: int, reader: Any) -> None:
        if not self.info.shard_records:
            return
        expected, actual = self.info.shard_records[shard], reader.num_records()
        if actual != expected:
            raise DatasetError(
                f"{self.path(shard)}: holds {actual} records but {layout.INFO_PATH} says "
                f"{expected}: the shard is truncated or from another conversion"
            )

    def read_requests(
        self, requests: Mapping[Any, tuple[np.ndarray, np.ndarray]]
    ) -> tuple[list[bytes], dict[Any, np.ndarray]]:
        """Reads every requested (shard, record) once, with one batched call per shard.

        `requests` maps a key to (shard, record) arrays (broadcast together). Returns the
        unique records and, per key, an array of the request's shape holding each (shard,
        record)'s position in that list.
        """
        unique, inverse, shapes = unique_pairs(requests)
        records: list[bytes] = [b""] * len(unique)
        for shard in np.unique(unique[:, 0]):
            rows = np.flatnonzero(unique[:, 0] == shard)
            for row, data in zip(rows, self.read(int(shard), unique[rows, 1]), strict=True):
                records[row] = data
        slots, start = {}, 0
        for key, shape in shapes.items():
            size = int(np.prod(shape))
            slots[key] = inverse[start : start + size].reshape(shape)
            start += size
        return records, slots

    def close(self) -> None:
        """Closes this thread's readers. A reader of a corrupt file can raise on close;
        that must not replace the DatasetError that named the file."""
        for reader in self._local.__dict__.pop("readers", {}).values():
            with contextlib.suppress(Exception):  # the read raised (or will) with the path
                reader.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "info": self.info, "describe": self.describe}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()


_warned: set[str] = set()


def _warn_unchecked(root: str, version: int) -> None:
    """Once per dataset and process: its records carry no checksums."""
    if root not in _warned:
        _warned.add(root)
        log.warning(
            "%s: format version %d has no per-record checksums (reads are not verified); "
            "`jaxload doctor %s` verifies its fingerprint, reconverting adds the checks",
            root,
            version,
            root,
        )


class DatasetFiles:
    """A converted dataset's metadata and shards: the one reader of the on-disk format."""

    def __init__(self, root: str | os.PathLike):
        self.root = str(root)
        self.info = read_info(root)
        self.episodes = read_episodes(root, self.info)
        self.readers = ShardReaders(root, self.info, self.episodes.locate)

    def tasks(self) -> dict[int, str]:
        return read_tasks(self.root)

    def frame_rows(self, row: int) -> np.ndarray:
        """Every frame of episode `row` as a structured array (`info.frame_dtype`)."""
        return np.concatenate(list(self._episode_rows(row, READ_BLOCKS)))

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


def unique_pairs(
    requests: Mapping[Any, tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, dict[Any, tuple[int, ...]]]:
    """The (shard, record) pairs `requests` name (a key -> (shard, record) arrays,
    broadcast together), sorted and unique, shape (n, 2); each requested pair's row in them
    (flat, the requests in order); and each request's shape."""
    shapes, packed = {}, []
    for key, (shard, record) in requests.items():
        shard, record = np.broadcast_arrays(
            np.asarray(shard, np.int64), np.asarray(record, np.int64)
        )
        shapes[key] = record.shape
        # One int64 per pair (records of a shard < 2**40): a 1-D unique, several times
        # faster than np.unique(axis=0), in the same order.
        packed.append((shard << 40 | record).reshape(-1))
    if not packed:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64), shapes
    unique, inverse = np.unique(np.concatenate(packed), return_inverse=True)
    return np.stack([unique >> 40, unique & ((1 << 40) - 1)], -1), inverse.reshape(-1), shapes
