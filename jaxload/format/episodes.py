"""meta/episodes.parquet and meta/tasks.parquet as compact numpy columns: read once per
process, checked against meta/info.json as they load, and mapped by worker processes.

    episodes = load_episodes(storage, info)     # checked; cached while anything holds it
    episodes.length, episodes.record_start[cam]  # int64 columns, one row per episode
    episodes.segments[cam].locate(rows, frames)  # GOP number and frame within it
    episodes.tasks[row], episodes.strings[key].get(row, i)

Nothing here holds a Python object per episode: every table is a few numpy columns in one
`jaxload.format.columns.Columns`, which worker processes map from shared memory instead of
unpickling a copy. A camera whose GOPs all have the fixed length of `info.json` (the
default transcode) keeps no per-GOP column at all: GOP `s` starts at frame `s * gop`.
Lists (an episode's tasks, a string feature's vocabulary) are ids into one vocabulary of
distinct strings, stored as UTF-8 bytes and offsets.

A process opens a dataset's table once while anything uses it (`load_episodes` keeps a
weak cache keyed by the dataset, its fingerprint and the file), so `jaxload.open(path)` and
`make_loader(path)` share one copy. Errors are `DatasetError`s naming the file (and the
episode, where there is one).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.errors import DatasetChangedError, DatasetError
from jaxload.format import layout, sealing
from jaxload.format.columns import Columns, ColumnsGone, _attach
from jaxload.format.episode_checks import check_gops, check_record_layout, check_table
from jaxload.format.layout import DatasetInfo
from jaxload.format.storage import DatasetStorage, open_parquet, read_parquet


class StringLists:
    """A list of string lists, one per row: ids into a vocabulary of distinct strings.

    `lists[row]` is row's list (`list[str]`), `lists.get(row, i)` one string of it.
    """

    def __init__(self, columns: Columns, prefix: str):
        self._ids = columns[f"{prefix}/ids"]
        self._offsets = columns[f"{prefix}/offsets"]
        self._vocab_offsets = columns[f"{prefix}/vocab_offsets"]
        self._vocab_bytes = columns[f"{prefix}/vocab_bytes"]
        self._decoded: list[str] | None = None

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def count(self, row: int) -> int:
        """Strings in row `row`'s list."""
        return int(self._offsets[row + 1] - self._offsets[row])

    def get(self, row: int, i: int) -> str:
        """String `i` of row `row`'s list (IndexError when out of range)."""
        if not 0 <= i < self.count(row):
            raise IndexError(i)
        return self._word(int(self._ids[self._offsets[row] + i]))

    def __getitem__(self, row: int) -> list[str]:
        words = self.vocabulary()
        return [words[i] for i in self._ids[self._offsets[row] : self._offsets[row + 1]]]

    def __iter__(self) -> Iterator[list[str]]:
        return (self[row] for row in range(len(self)))

    def firsts(self, default: str = "") -> np.ndarray:
        """Each row's first string (`default` for an empty list), an object array."""
        words = np.array([*self.vocabulary(), default], dtype=object)
        counts = np.diff(self._offsets)
        first = np.where(counts > 0, self._ids[np.minimum(self._offsets[:-1], len(self._ids) - 1)]
                         if len(self._ids) else -1, -1)  # fmt: skip
        return words[first]

    def vocabulary(self) -> list[str]:
        """The distinct strings, decoded once per process."""
        if self._decoded is None:
            self._decoded = [self._word(i) for i in range(len(self._vocab_offsets) - 1)]
        return self._decoded

    def _word(self, i: int) -> str:
        start, stop = self._vocab_offsets[i], self._vocab_offsets[i + 1]
        return self._vocab_bytes[start:stop].tobytes().decode("utf-8")


class Segments:
    """One camera's GOP table: the frame at which each GOP of each episode starts.

    Fixed GOPs (`gop` set: the default transcode) need no column: GOP `s` of any episode
    starts at frame `s * gop`. Otherwise (copied streams) the starts are one sorted column
    of positions in the table's frames (`start[row] + frame`), so one `searchsorted`
    locates a whole batch.
    """

    def __init__(self, columns: Columns, camera: str, gop: int | None):
        self.gop = gop
        self._length, self._start = columns["length"], columns["start"]
        if gop is None:
            self._first = columns[f"gops/{camera}/first"]  # (n + 1,) first GOP of each row
            self._position = columns[f"gops/{camera}/position"]

    def counts(self) -> np.ndarray:
        """GOPs of every episode."""
        if self.gop is not None:
            return -(-self._length // self.gop)
        return np.diff(self._first)

    def count(self, row: int) -> int:
        """GOPs of episode `row`."""
        if self.gop is not None:
            return int(-(-self._length[row] // self.gop))
        return int(self._first[row + 1] - self._first[row])

    def starts(self, row: int) -> np.ndarray:
        """The first frame of each GOP of episode `row`."""
        if self.gop is not None:
            return np.arange(self.count(row), dtype=np.int64) * self.gop
        return self._position[self._first[row] : self._first[row + 1]] - self._start[row]

    def frames(self, row: int, segment: int) -> int:
        """Frames in GOP `segment` of episode `row`."""
        starts = self.starts(row)
        end = starts[segment + 1] if segment + 1 < len(starts) else self._length[row]
        return int(end - starts[segment])

    def locate(self, rows: np.ndarray, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(GOP number, frame within that GOP) of each frame `frames` of episode `rows`
        (arrays that broadcast together)."""
        if self.gop is not None:
            return frames // self.gop, frames % self.gop
        position = self._start[rows] + frames
        flat = np.searchsorted(self._position, position, side="right") - 1
        return flat - self._first[rows], position - self._position[flat]


class Episodes:
    """meta/episodes.parquet as numpy columns, one row per episode in source order.

    `record_start[cam]` is the record of the camera's init segment in the episode's shard;
    its GOP records follow (`layout.segment_record`); `segments[cam]` says where its GOPs
    start. `start` is each episode's first frame among the table's frames. `tasks` and
    `strings[key]` (a string feature's per-episode vocabulary) are `StringLists`.
    """

    def __init__(
        self,
        columns: Columns,
        gops: Mapping[str, int | None],
        strings: Sequence[str],
        storage: DatasetStorage,
        info: DatasetInfo,
    ):
        self.columns, self.gops, self.string_keys = columns, dict(gops), tuple(strings)
        self.storage, self.info = storage, info  # to read the table again (unpickling)
        self.root = storage.name
        self.index = columns["index"]  # episode_index
        self.length = columns["length"]
        self.shard = columns["shard"]
        self.frames_record_start = columns["frames_record_start"]
        self.start = columns["start"]
        self.record_start = {c: columns[f"record_start/{c}"] for c in self.gops}
        self.segments = {c: Segments(columns, c, gop) for c, gop in self.gops.items()}
        self.tasks = StringLists(columns, "tasks")
        self.strings = {k: StringLists(columns, f"strings/{k}") for k in self.string_keys}

    def __len__(self) -> int:
        return len(self.index)

    def __reduce__(self) -> tuple:
        shared = self.columns._share()
        columns = self.columns if shared is None else None
        state = (shared, columns, self.gops, self.string_keys, self.storage, self.info)
        return (_unpickle_episodes, state)

    def string(self, key: str, row: int, index: int) -> str:
        """The value of string feature `key` whose stored index is `index` in episode `row`."""
        vocabulary = self.strings[key]
        if not 0 <= index < vocabulary.count(row):
            raise DatasetError(
                f"{self.where(row)}: feature {key!r} has string index {index}, but the "
                f"episode has {vocabulary.count(row)} strings; the dataset is corrupt "
                "(reconvert it)"
            )
        return vocabulary.get(row, index)

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
        count = layout.camera_record_count(self.segments[camera].count(row))
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
                    first = int(self.segments[cam].starts(row)[gop])
                    last = first + self.segments[cam].frames(row, gop) - 1
                    return f"{episode}, camera {cam}, frames {first}..{last}"
        return "no episode's record"

    def records_end(self, row: int) -> int:
        """One past the last record episode `row` uses in its shard."""
        ends = [self.frame_records(row).stop]
        ends += [self.camera_records(row, c).stop for c in self.record_start]
        return max(ends)


class TaskTable(Mapping[int, str]):
    """meta/tasks.parquet: task_index -> task string, as shared columns."""

    def __init__(self, columns: Columns, storage: DatasetStorage, info: DatasetInfo | None):
        self.columns, self.storage, self.info = columns, storage, info
        self._index = columns["task_index"]  # sorted
        self._strings = StringLists(columns, "task")

    def __getitem__(self, task_index: int) -> str:
        row = int(np.searchsorted(self._index, task_index))
        if row == len(self._index) or self._index[row] != task_index:
            raise KeyError(task_index)
        return self._strings.get(row, 0)

    def __iter__(self) -> Iterator[int]:
        return iter(self._index.tolist())

    def __len__(self) -> int:
        return len(self._index)

    def __reduce__(self) -> tuple:
        shared = self.columns._share()
        columns = self.columns if shared is None else None
        return (_unpickle_tasks, (shared, columns, self.storage, self.info))


def load_episodes(storage: DatasetStorage, info: DatasetInfo) -> Episodes:
    """meta/episodes.parquet of the dataset in `storage`, checked against its info.json.

    A table that contradicts info.json (episode or frame totals, a length < 1, a shard out
    of range, repeated episode indices, GOP tables that do not start at frame 0 and rise
    within the episode, records that do not follow each other) raises a DatasetError naming
    the file: a corrupt table must not shift which frames are served. While anything holds
    the result, loading the same file of the same dataset again returns it.

    Args:
        storage: where the dataset's files are (`jaxload.format.storage.as_storage`).
        info: its meta/info.json (`jaxload.format.reader.read_info`).

    Example:
        >>> from jaxload.format.reader import read_info
        >>> from jaxload.format.storage import LocalDirectory
        >>> episodes = load_episodes(LocalDirectory("out/demo"), read_info("out/demo"))
        >>> len(episodes), episodes.length.tolist(), episodes.tasks[0]
        (4, [5, 1, 2, 12], ['pick up the cube and put it in the bowl'])
    """
    key = _cache_key(storage, info, layout.EPISODES_PATH)
    return _cached(key, lambda: _read_episodes(storage, info))


def load_tasks(storage: DatasetStorage, info: DatasetInfo | None = None) -> TaskTable:
    """meta/tasks.parquet of the dataset in `storage` as a `TaskTable` (cached as
    `load_episodes` is).

    Args:
        storage: where the dataset's files are.
        info: its meta/info.json (read when not given): the table must be what the
            records were written with (its digest, `sealing.check_tasks`), and a copy
            unpickled where the shared columns are gone reads it again only from that
            version of the dataset.

    Example:
        >>> from jaxload.format.storage import LocalDirectory
        >>> dict(load_tasks(LocalDirectory("out/demo")))
        {0: 'pick up the cube and put it in the bowl', 1: 'push the cube to the left edge'}
    """
    if info is None:  # the table is checked against info.json's digest of it (format 6)
        info = _info_of(storage)
    key = _cache_key(storage, info, layout.TASKS_PATH)
    return _cached(key, lambda: _read_tasks(storage, info))


def _info_of(storage: DatasetStorage) -> DatasetInfo:
    raw = storage.read(layout.INFO_PATH)
    if raw is None:
        raise DatasetError(f"{storage.where(layout.INFO_PATH)}: missing")
    return layout.parse_info(raw, storage.where(layout.INFO_PATH), storage.name)


def _cached(key: Any, read: Any) -> Any:
    """The table cached under `key` (None: not cacheable), else `read()`, cached."""
    with _cache_lock:
        cached = _cache.get(key) if key else None
    if cached is not None:
        return cached
    table = read()
    if key:
        with _cache_lock:
            _cache[key] = table
    return table


# Tables opened in this process, while anything holds them.
_cache: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_cache_lock = threading.Lock()


def _cache_key(storage: DatasetStorage, info: DatasetInfo | None, relative: str) -> tuple | None:
    """What identifies a metadata file's content: the dataset (its directory or URL and,
    for the episode table, its fingerprint) and, for a local file, its inode, size and
    modification time. None when the file cannot be identified (no caching)."""
    fingerprint = info.fingerprint if info is not None else None
    if storage.local_path is not None:
        import os

        try:
            st = os.stat(storage.where(relative))
        except OSError:
            return None
        return (type(storage), storage.name, relative, fingerprint, st.st_ino, st.st_size,
                st.st_mtime_ns)  # fmt: skip
    if fingerprint is None:
        return None  # a remote tasks table: no cheap identity
    return (type(storage), storage.name, relative, fingerprint)


def _unpickle_episodes(
    shared: tuple | None,
    columns: Columns | None,
    gops: Mapping[str, int | None],
    strings: Sequence[str],
    storage: DatasetStorage,
    info: DatasetInfo,
) -> Episodes:
    """An Episodes over the shared columns of the process that pickled it; when those are
    gone, the table read again (from the same version of the dataset)."""
    columns = columns or _attach_or_none(shared, storage, info)
    if columns is None:
        return load_episodes(storage, info)
    return Episodes(columns, gops, strings, storage, info)


def _unpickle_tasks(
    shared: tuple | None, columns: Columns | None, storage: DatasetStorage, info: DatasetInfo | None
) -> TaskTable:
    """A TaskTable over shared columns, or read again when they are gone."""
    columns = columns or _attach_or_none(shared, storage, info)
    if columns is None:
        return load_tasks(storage, info)
    return TaskTable(columns, storage, info)


def _attach_or_none(shared: tuple, storage: DatasetStorage, info: DatasetInfo | None):
    """The shared columns `shared` names; None when they are gone and the dataset on disk is
    still the version `info` describes (DatasetChangedError when it is not)."""
    try:
        return _attach(shared)
    except ColumnsGone:
        if info is not None:
            raw = storage.read(layout.INFO_PATH)
            now = None if raw is None else layout.parse_info(raw, layout.INFO_PATH, storage.name)
            if now is None or now.fingerprint != info.fingerprint:
                raise DatasetChangedError(
                    f"{storage.name}: the dataset changed on disk after it was opened; reopen it"
                ) from None
        return None


# --- reading the parquet tables ------------------------------------------------------------


_DIGESTED = {"index": "episode_index", "length": "length"}  # columns -> their parquet names


def episode_columns(cameras: Sequence[str] | Mapping[str, Any]) -> list[str]:
    """The columns of meta/episodes.parquet for these cameras (what the reader needs)."""
    columns = ["episode_index", "length", "tasks", "shard", "frames_record_start"]
    for cam in cameras:
        columns += [
            layout.segment_column(cam, "record_start"),
            layout.segment_column(cam, "segment_starts"),
        ]
    return columns


def _read_episodes(storage: DatasetStorage, info: DatasetInfo) -> Episodes:
    import pyarrow as pa

    path = storage.where(layout.EPISODES_PATH)
    strings = [k for k, f in info.features.items() if f.is_string]
    wanted = [*episode_columns(info.cameras), *map(layout.strings_column, strings)]
    file = open_parquet(storage, layout.EPISODES_PATH, wanted)
    scalars = {"index": "episode_index", "length": "length", "shard": "shard"}
    scalars["frames_record_start"] = "frames_record_start"
    scalars |= {f"record_start/{c}": layout.segment_column(c, "record_start") for c in info.cameras}
    table = file.read(scalars.values())
    columns = {name: _ints(table, column, path) for name, column in scalars.items()}
    check_table(path, info, columns)
    digests = {name: sealing.ints_digest(columns[key]) for key, name in _DIGESTED.items()}
    columns["start"] = np.cumsum(columns["length"]) - columns["length"]
    # One camera's GOP table at a time (DROID's are 6.8 million values each), each checked
    # (tiling, or fixed GOPs) and dropped unless its starts are irregular.
    counts, gops = {}, {}
    for cam in info.cameras:
        column = layout.segment_column(cam, "segment_starts")
        offsets, starts = _int_lists(file.read([column])[column], f"{path}: column {column}")
        digests[column] = sealing.int_lists_digest(np.diff(offsets), starts)
        gop = info.cameras[cam].gop
        gops[cam] = gop if gop and regular(offsets, starts, columns["length"], gop) else None
        check_gops(path, cam, columns, offsets, starts, tiled=gops[cam] is not None)
        counts[cam] = np.diff(offsets)
        if gops[cam] is None:
            columns[f"gops/{cam}/first"] = offsets
            columns[f"gops/{cam}/position"] = starts + np.repeat(columns["start"], counts[cam])
    check_record_layout(path, info, columns, counts)
    for key, column in [
        ("tasks", "tasks"),
        *((f"strings/{k}", layout.strings_column(k)) for k in strings),
    ]:
        values = file.read([column])[column]
        columns |= _string_lists(key, values, f"{path}: column {column}")
        digests[column] = sealing.string_lists_digest(*_lists(values))
    # What the records were written with (format 5): a GOP table shifted by a frame, or
    # any other column edited after conversion, fails here, naming the column.
    sealing.check_table(path, info.metadata_xxh3 or {}, digests)
    del table, file
    pa.default_memory_pool().release_unused()  # what decoding the parquet took, to the OS
    return Episodes(Columns(columns), gops, strings, storage, info)


def _read_tasks(storage: DatasetStorage, info: DatasetInfo | None) -> TaskTable:
    path = storage.where(layout.TASKS_PATH)
    table = read_parquet(storage, layout.TASKS_PATH, ["task_index", "task"])
    index = _ints(table, "task_index", path)
    order = np.argsort(index, kind="stable")
    index = index[order]
    if index.size > 1 and np.any(np.diff(index) == 0):
        twice = int(index[np.flatnonzero(np.diff(index) == 0)[0]])
        raise DatasetError(f"{path}: task_index {twice} appears twice")
    if info is not None:  # which string each frame's task_index names (format 6)
        tasks = table["task"]
        if np.any(order != np.arange(order.size)):  # (a take imports pandas: 0.25 s)
            tasks = tasks.take(order)
        sealing.check_tasks(path, info.metadata_xxh3, sealing.tasks_digest(index, tasks))
    columns = _string_lists("task", table["task"], f"{path}: column task", lists=False)
    columns["task/ids"] = columns["task/ids"][order]  # one task per row, by task_index
    return TaskTable(Columns({"task_index": index, **columns}), storage, info)


def _ints(table: Any, name: str, path: str) -> np.ndarray:
    return _integers(table[name], f"{path}: column {name}")


def _integers(column: Any, where: str) -> np.ndarray:
    """An integer column without nulls as int64."""
    import pyarrow as pa

    if not pa.types.is_integer(column.type):
        raise DatasetError(f"{where} holds {column.type}, not integers")
    if column.null_count:
        raise DatasetError(f"{where} has missing values")
    return _numpy(column).astype(np.int64, copy=False)


def _numpy(column: Any) -> np.ndarray:
    """A pyarrow (chunked) numeric array without nulls as numpy: its buffers viewed, not
    converted (pyarrow's conversions import pandas, 0.4 s, which a trainer need not)."""
    import pyarrow as pa

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    t = column.type
    kind = "f" if pa.types.is_floating(t) else "i" if pa.types.is_signed_integer(t) else "u"
    dtype = np.dtype(f"<{kind}{t.bit_width // 8}")
    parts = [
        np.frombuffer(c.buffers()[1], dtype, len(c), c.offset * dtype.itemsize)
        for c in chunks
        if len(c)
    ]
    return parts[0] if len(parts) == 1 else np.concatenate([np.zeros(0, dtype), *parts])


def _int_lists(column: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    """A list<int> column as (offsets, flat int64 values); a missing list is empty."""
    lengths, values = _lists(column)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return offsets, _integers(values, where)


def _lists(column: Any) -> tuple[np.ndarray, Any]:
    """(length of each list, their values concatenated) of a list column; a missing list
    is empty."""
    import pyarrow as pa

    if column.null_count:
        import pyarrow.compute as pc

        return _numpy(pc.list_value_length(column).fill_null(0)), pc.list_flatten(column)
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    lengths = [np.diff(_numpy(c.offsets)) for c in chunks]
    values = pa.chunked_array([c.flatten() for c in chunks], column.type.value_type)
    return np.concatenate([np.zeros(0, np.int64), *lengths]), values


def _string_lists(
    prefix: str, column: Any, where: str, *, lists: bool = True
) -> dict[str, np.ndarray]:
    """A list<string> column (`lists=False`: a string column, one string per row) as the
    columns of a `StringLists`: each row's strings as ids into one vocabulary of distinct
    strings (UTF-8 bytes and offsets)."""
    import pyarrow as pa

    if lists:
        lengths, values = _lists(column)
    else:
        lengths, values = np.ones(len(column), np.int64), column
    if values.null_count:
        raise DatasetError(f"{where} has missing values")
    if isinstance(values, pa.ChunkedArray):
        values = pa.chunked_array(values.chunks, values.type).combine_chunks()
    encoded = values.cast(pa.large_string()).dictionary_encode()
    vocabulary = encoded.dictionary
    _, offsets, data = vocabulary.buffers()
    vocab_offsets = np.frombuffer(offsets, np.int64)[vocabulary.offset :][: len(vocabulary) + 1]
    vocab_bytes = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return {
        f"{prefix}/ids": _numpy(encoded.indices).astype(np.int32),
        f"{prefix}/offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        f"{prefix}/vocab_offsets": (vocab_offsets - vocab_offsets[0]).astype(np.int64)
        if len(vocabulary)
        else np.zeros(1, np.int64),
        f"{prefix}/vocab_bytes": vocab_bytes[vocab_offsets[0] : vocab_offsets[-1]]
        if len(vocabulary)
        else vocab_bytes[:0],
    }


def regular(offsets: np.ndarray, starts: np.ndarray, lengths: np.ndarray, gop: int) -> bool:
    """Whether every episode's GOPs start at 0, gop, 2 gop, ... up to its end (a table
    that is regular also tiles its episodes)."""
    counts = np.diff(offsets)
    if not len(lengths) or np.any(lengths < 1) or not np.array_equal(counts, -(-lengths // gop)):
        return False
    if np.any(starts[offsets[:-1]] != 0):
        return False
    steps = np.equal(np.subtract(starts[1:], starts[:-1]), gop)
    steps[offsets[1:-1] - 1] = True  # where the next episode's GOPs begin
    return bool(steps.all())
