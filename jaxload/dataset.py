"""`jaxload.open`: a map-style dataset over the frames of a converted dataset.

One sample is read with one batched ArrayRecord read per shard (usually one): the frame
records its windows need plus the video segments holding its frames. Many samples can be
read together with `__getitems__`, which also decodes each needed segment only once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import numbers
import operator
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxload.decode.frames import EncodedFrames, decode_grouped
from jaxload.episode_dataset import ReadHints
from jaxload.errors import DatasetError, WindowError
from jaxload.format import layout
from jaxload.format.episodes import load_tasks
from jaxload.format.reader import DatasetFiles
from jaxload.format.shards import read_requests, unique_pairs
from jaxload.format.storage import RecordReader
from jaxload.metadata import DatasetMetadata, EpisodeTable, shape_dtype_structs
from jaxload.storage.urls import redact, warn_if_unused
from jaxload.windows import resolve_windows_in_frames, window_frames

Sample = dict[str, Any]
Index = int | slice | Sequence[int] | np.ndarray


class JaxloadDataset:
    """Frames of a jaxload dataset, with LeRobotDataset's keys, windows and padding.

    Position `i` is the i-th frame of the selected episodes in source order; with all
    episodes selected it is the frame whose LeRobot `index` is `i`. `ds[i]` is one sample
    (negative `i` counts from the end, as in Python); `ds[2:5]`, `ds[[3, 5]]` and
    `ds[np.array([3, 5])]` are lists of samples, read together.

    Example:
        >>> ds = jaxload.open("out/demo", delta_timestamps={"action": [0.0, 0.1, 0.2]})
        >>> sample = ds[0]
        >>> sample["action"].shape, sample["action_is_pad"]
        ((3, 4), array([False, False, False]))
        >>> sample["observation.images.top"].shape, sample["task"]
        ((48, 64, 3), 'pick up the cube and put it in the bowl')
        >>> ds.num_frames, ds.num_episodes, ds.fps, ds.meta.total_frames
        (20, 4, 10, 20)
        >>> [s["index"] for s in ds[2:4]], ds.episode_data_index["to"]
        ([array(2), array(3)], array([ 5,  6,  8, 20]))

    LeRobotDataset's names work too: `num_frames` and `num_episodes` (of the selection),
    `episode_data_index` (`{"from", "to"}` positions of each selected episode), and, for
    the whole dataset as in LeRobot, `meta` (`jaxload.metadata.DatasetMetadata`),
    `features`, `stats`, `tasks`, `camera_keys`, `fps`.

    Instances are picklable and thread-safe (each thread opens its own file readers and
    decoders), so they serve directly as a Grain `RandomAccessDataSource`.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        episodes: Iterable[int] | None = None,
        speed: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        remote: Any = None,
        delta_frames: Mapping[str, Sequence[int]] | None = None,
    ):
        from jaxload.storage.object_store import open_storage, remote_store_of

        self.path = redact(path)  # as messages and the loader state name it
        # Where its files live: a local directory, or an object store (a URL).
        self.storage = open_storage(path, storage_options=storage_options, remote=remote)
        files = DatasetFiles(self.storage)
        self.info = files.info
        self.fps = self.info.fps
        self.camera_keys = sorted(self.info.cameras)
        self.delta_timestamps = dict(delta_timestamps) if delta_timestamps else None
        self.video_cameras = self.info.cameras  # every camera is read compressed
        try:
            self._offsets = resolve_windows_in_frames(
                delta_timestamps, delta_frames, self.fps, [*self.info.features, *self.camera_keys]
            )
        except WindowError as e:  # in a mixture, say which dataset (and its fps)
            raise WindowError(f"{self.path} ({self.fps} fps): {e}") from None
        self._frame_dtype = self.info.frame_dtype
        self._string_keys = [k for k, f in self.info.features.items() if f.is_string]
        self._tasks = load_tasks(self.storage, self.info)
        # The whole table (shared by every view of this dataset in this process, and mapped
        # by worker processes), and the rows this view serves (None: all of them).
        self._episodes = files.episodes
        self._rows = None if episodes is None else self._select(files.episodes.index, episodes)
        self._set_selection()
        self._readers: RecordReader = files.readers
        # The RemoteStore of a dataset read from object storage (fetching ahead, stats).
        self.remote_store = remote_store_of(files.readers)
        self._speed = None
        if speed:  # per-task speed bucket of each episode (jaxload.stats.speed)
            from jaxload.stats.speed import speed_labels

            self._speed = speed_labels(self)
        self.fingerprint = self._selection_fingerprint()

    # --- metadata -------------------------------------------------------------------

    def _set_selection(self) -> None:
        """The selected episodes' columns: views of the table when every episode is."""
        table, rows = self._episodes, self._rows
        if rows is None:
            self.episode_index, self.episode_lengths = table.index, table.length
            self.episode_starts = table.start
        else:
            self.episode_index, self.episode_lengths = table.index[rows], table.length[rows]
            self.episode_starts = np.cumsum(self.episode_lengths) - self.episode_lengths
        self._num_frames = int(self.episode_lengths.sum())

    def __getstate__(self) -> dict[str, Any]:
        # The selection's columns are views of the shared table (or cheap to recompute);
        # `meta` is rebuilt on use.
        derived = ("episode_index", "episode_lengths", "episode_starts", "meta")
        return {k: v for k, v in self.__dict__.items() if k not in derived}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._set_selection()

    def _select(self, all_ids: np.ndarray, episodes: Iterable[int]) -> np.ndarray:
        """Rows of the episode table to serve: those listed."""
        wanted = np.unique(np.asarray(list(episodes), dtype=np.int64))
        missing = np.setdiff1d(wanted, all_ids)
        if missing.size:
            raise DatasetError(
                f"{self.path}: episodes {missing.tolist()} not in this dataset "
                f"(it has episodes {int(all_ids.min())}..{int(all_ids.max())})"
            )
        return np.flatnonzero(np.isin(all_ids, wanted))

    def _selection_fingerprint(self) -> str:
        """Content fingerprint plus what this view selects: same value <=> same samples."""
        view = {
            "content": self.info.fingerprint,
            "episodes": self.episode_index.tolist(),
            "windows": {k: v.tolist() for k, v in sorted(self._offsets.items())},
            "speed": self._speed is not None,
        }
        return hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()

    def __len__(self) -> int:
        return self._num_frames

    # --- what a loader reads (jaxload.episode_dataset.EpisodeDataset) ------------------

    @property
    def name(self) -> str:
        """Its path or URL (credentials removed), as messages and the loader state name it."""
        return self.path

    @property
    def content_fingerprint(self) -> str:
        """The converted content's fingerprint (whatever the selection and windows)."""
        return self.info.fingerprint

    @property
    def window_frames(self) -> dict[str, np.ndarray]:
        """Per windowed key, its integer frame offsets from the anchor."""
        return self._offsets

    def read(
        self, positions: Sequence[int], hints: ReadHints | None = None
    ) -> tuple[list[Sample], dict[str, EncodedFrames]]:
        """The loader's read (`EpisodeDataset.read`): `read_encoded` with what the read
        stage planned ahead."""
        if hints is None:
            return self.read_encoded(positions)
        return self.read_encoded(positions, plan=hints.plan, context=hints.context)

    # --- LeRobotDataset's names -----------------------------------------------------

    @functools.cached_property
    def meta(self) -> DatasetMetadata:
        """The whole dataset's metadata (`LeRobotDatasetMetadata`'s names), built on first use."""
        return DatasetMetadata(self.storage, self.info, EpisodeTable(self._episodes), self._tasks)

    @property
    def num_frames(self) -> int:
        """Frames of the selected episodes (= len(self))."""
        return self._num_frames

    @property
    def num_episodes(self) -> int:
        """Selected episodes."""
        return len(self.episode_index)

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        """LeRobot's info.json features of the dataset (see `DatasetMetadata`)."""
        return self.meta.features

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """The whole dataset's meta/stats.json as numpy arrays, as LeRobot's `meta.stats`."""
        return self.meta.stats

    @property
    def tasks(self) -> dict[int, str]:
        """task_index -> task string, for the whole dataset."""
        return dict(self._tasks)

    @property
    def episode_data_index(self) -> dict[str, np.ndarray]:
        """LeRobot's `{"from": ..., "to": ...}`: selected episode k is `self[from[k]:to[k]]`."""
        return {
            "from": self.episode_starts.copy(),
            "to": self.episode_starts + self.episode_lengths,
        }

    def __repr__(self) -> str:
        return (
            f"JaxloadDataset({self.path!r}, frames={len(self)}, "
            f"episodes={len(self.episode_index)}, cameras={self.camera_keys})"
        )

    def element_spec(self) -> dict[str, Any]:
        """A `jax.ShapeDtypeStruct` per value of a sample except "task"; a string feature's
        dtype is numpy's str (`np.dtype(str)`): it stays host-local in batches.

        Example:
            >>> ds = jaxload.open("out/demo", delta_timestamps={"action": [0.0, 0.1, 0.2]})
            >>> ds.element_spec()["action"]
            ShapeDtypeStruct(shape=(3, 4), dtype=float32)
        """
        return shape_dtype_structs(self._spec())

    def _spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """(shape, dtype) per key of a sample except "task"."""
        spec = {}
        for key, feature in self.info.features.items():
            window = self._window_shape(key)
            dtype = np.dtype(str) if feature.is_string else np.dtype(feature.dtype)
            spec[key] = ((*window, *feature.shape), dtype)
        for key, cam in self.info.cameras.items():
            window = self._window_shape(key)
            spec[key] = ((*window, cam.height, cam.width, 3), np.dtype(np.uint8))
        for key, offsets in self._offsets.items():
            spec[f"{key}_is_pad"] = ((len(offsets),), np.dtype(bool))
        if self._speed is not None:
            spec["speed"] = ((), np.dtype(np.int64))
        return spec

    def _window_shape(self, key: str) -> tuple[int, ...]:
        if key not in self._offsets:
            return ()
        n = len(self._offsets[key])
        # LeRobot squeezes the time axis of a one-frame video window, not of tabular ones.
        return () if (key in self.info.cameras and n == 1) else (n,)

    # --- reading --------------------------------------------------------------------

    def __getitem__(self, index: Index) -> Sample | list[Sample]:
        """One sample for an int (negative counts from the end); a list of samples for a
        slice or a 1-D sequence/array of ints (read together, as `__getitems__`)."""
        positions = _positions(index, self._num_frames, self.path)
        if positions is None:
            return self.__getitems__([operator.index(index)])[0]
        return self.__getitems__(positions)

    def __getitems__(self, positions: Sequence[int]) -> list[Sample]:
        """Reads many samples at once: one batched read, one decoder per camera."""
        if len(positions) == 0:
            return []
        samples, videos = self.read_encoded(positions)
        decoded = decode_grouped(list(videos.values()))
        for cam, images in zip(videos, decoded, strict=True):
            squeeze = not self._window_shape(cam)
            for b, sample in enumerate(samples):
                sample[cam] = images[b, 0] if squeeze else images[b]
        return samples

    def plan_read(self, positions: Sequence[int]) -> ReadPlan:
        """What reading `positions` reads, worked out once: `jaxload.storage.prefetch`
        plans a batch's reads ahead (`ReadPlan.record_keys`) and hands the plan to
        `read_encoded` when the batch is read, instead of working it out twice."""
        checked = self._check_positions(positions)
        return ReadPlan(checked, self._requests(checked))

    def record_keys(self, positions: Sequence[int]) -> np.ndarray:
        """The (shard, record) pairs, shape (n, 2), that reading `positions` reads."""
        return self.plan_read(positions).record_keys()

    def _requests(self, positions: np.ndarray) -> tuple[dict, np.ndarray, dict, dict, dict]:
        """(record requests, selected episodes, frames needed per key, pads, camera-local
        frames) of checked positions."""
        ep = np.searchsorted(self.episode_starts, positions, side="right") - 1
        frame = positions - self.episode_starts[ep]
        length = self.episode_lengths[ep]
        row = ep if self._rows is None else self._rows[ep]  # in the episode table
        shard = self._episodes.shard[row][:, None]

        # Frames each key needs, (B, T): the anchor itself ("") and every window.
        needed, pads = {"": frame[:, None]}, {}
        for key, offsets in self._offsets.items():
            needed[key], pads[key] = window_frames(frame, length, offsets)
        for cam in self.camera_keys:
            needed.setdefault(cam, frame[:, None])

        requests, local_frames = {}, {}
        for key, frames in needed.items():
            if key in self.info.cameras:
                segment, local_frames[key] = self._episodes.segments[key].locate(
                    row[:, None], frames
                )
                start = self._episodes.record_start[key][row][:, None]
                requests[key] = (shard, layout.segment_record(start, segment))
                # Any episode's init segment serves the camera's GOPs: the first sample's.
                requests[_init_key(key)] = (shard[:1], start[:1])
            else:
                block = frames // layout.FRAMES_PER_BLOCK
                requests[key] = (shard, self._episodes.frames_record_start[row][:, None] + block)
        return requests, ep, needed, pads, local_frames

    def read_encoded(
        self, positions: Sequence[int], plan: ReadPlan | None = None, context: Any = None
    ) -> tuple[list[Sample], dict[str, EncodedFrames]]:
        """Samples without their camera keys, plus each camera's frames still compressed.

        `EncodedFrames.decode(device)` yields (B, T, H, W, 3) frames; a one-frame camera
        window (and a camera without window) is squeezed to (H, W, 3) per sample, as
        LeRobot does. This split lets the training process decode on its GPU. `plan`:
        `plan_read` of the same positions, made earlier (used only if it is theirs);
        `context`: what the loader's read stage tells a remote store of this read
        (`jaxload.storage.remote.ReadContext`).
        """
        positions = self._check_positions(positions)
        if plan is not None and np.array_equal(plan.positions, positions):
            requests, ep, needed, pads, local_frames = plan.parts
        else:
            requests, ep, needed, pads, local_frames = self._requests(positions)
        row = ep if self._rows is None else self._rows[ep]
        records, slots = read_requests(self._readers, requests, context)

        videos = {}
        for cam in self.camera_keys:
            camera = self.info.cameras[cam]
            videos[cam] = EncodedFrames.from_slots(
                records,
                slots[cam],
                local_frames[cam],
                init=records[slots[_init_key(cam)][0, 0]],
                codec=camera.codec,
                width=camera.width,
                height=camera.height,
                where=f"{self.path}: camera {cam}, episodes {_some(self.episode_index[ep])}",
            )
        frame_keys = [k for k in needed if k not in self.info.cameras]
        rows = _FrameRows(records, {k: slots[k] for k in frame_keys}, self._frame_dtype)
        samples = []
        for b in range(len(positions)):
            anchor = rows.get(slots[""][b, 0], needed[""][b, 0])
            self._check_episode_index(anchor, int(ep[b]))
            sample: Sample = {key: np.array(anchor[key]) for key in self.info.features}
            for key in frame_keys[1:]:
                sample[key] = np.ascontiguousarray(rows.get(slots[key][b], needed[key][b])[key])
            for key in self._string_keys:
                sample[key] = self._strings(key, int(row[b]), sample[key])
            for key, pad in pads.items():
                sample[f"{key}_is_pad"] = pad[b]
            if self._speed is not None:
                sample["speed"] = np.array(self._speed[ep[b]])
            sample["task"] = self._task(int(anchor["task_index"]))
            samples.append(sample)
        return samples, videos

    def _check_episode_index(self, frame: np.void, row: int) -> None:
        """A DatasetError naming meta/episodes.parquet when the frame read for episode row
        `row` says it is another episode's (the table's episode_index edited: the records
        were written under the converted ids)."""
        if "episode_index" in self._frame_dtype.names:
            stored, listed = int(frame["episode_index"]), int(self.episode_index[row])
            if stored != listed:
                raise DatasetError(
                    f"{self.storage.where(layout.EPISODES_PATH)}: says episode_index {listed}, "
                    f"but its frames were converted as episode {stored}: the table was edited "
                    "after conversion (restore it, or reconvert the dataset)"
                )

    def _check_positions(self, positions: Sequence[int]) -> np.ndarray:
        p = np.asarray(positions)
        if p.size and p.dtype.kind not in "iu":
            raise TypeError(f"{self.path}: positions must be integers, got dtype {p.dtype}")
        p = p.astype(np.int64).reshape(-1)
        p = np.where(p < 0, p + self._num_frames, p)
        bad = (p < 0) | (p >= self._num_frames)
        if bad.any():
            raise IndexError(
                f"{self.path}: index {np.asarray(positions).reshape(-1)[bad][0]} out of range "
                f"for a dataset of {self._num_frames} frames"
            )
        return p

    def _strings(self, key: str, row: int, indices: np.ndarray) -> str | np.ndarray:
        """Stored indices of a string feature -> its strings (str, or an array of str)."""
        if indices.ndim == 0:
            return self._episodes.string(key, row, int(indices))
        return np.array([self._episodes.string(key, row, int(i)) for i in indices], dtype=str)

    def _task(self, task_index: int) -> str:
        try:
            return self._tasks[task_index]
        except KeyError:
            raise DatasetError(
                f"{self.path}: task_index {task_index} missing from {layout.TASKS_PATH}"
            ) from None


def open(
    path: str | os.PathLike,
    *,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    episodes: Iterable[int] | None = None,
    speed: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote: Any = None,
) -> JaxloadDataset:
    """Opens a converted jaxload dataset as a map-style dataset over frames.

    Example:
        >>> ds = jaxload.open("out/demo", delta_timestamps={"action": [k / 10 for k in range(16)]})
        >>> len(ds), ds[0]["action"].shape
        (20, (16, 4))

    `path` may be a URL (`s3://`, `gs://`, `hf://`, `https://`; docs/LOADER.md, "Remote
    datasets"): records are then fetched by byte range and verified like local reads.
    `storage_options` go to the fsspec filesystem (endpoint, credentials); `remote` (a
    `jaxload.RemoteOptions`) sets the cache budget, concurrency and lookahead::

        ds = jaxload.open("s3://bucket/demo", storage_options={"anon": True},
                          remote=jaxload.RemoteOptions(cache_bytes=1 << 30))

    `speed=True` adds the key "speed": the episode's per-task speed bucket (0, 10, ..., 100,
    see jaxload.stats.speed), computed once per dataset and stored in its metadata.
    """
    warn_if_unused([path], storage_options, remote)
    return JaxloadDataset(
        path,
        delta_timestamps=delta_timestamps,
        episodes=episodes,
        speed=speed,
        storage_options=storage_options,
        remote=remote,
    )


def _positions(index: Any, length: int, where: str) -> np.ndarray | range | None:
    """The positions `ds[index]` reads: None for one int (one sample), else those of a
    slice or a 1-D integer sequence/array (range checks follow in `_check_positions`)."""
    if isinstance(index, bool | np.bool_):
        raise TypeError(f"{where}: ds[{index!r}]: a bool is not a position")
    if isinstance(index, numbers.Integral):  # int, numpy integer
        return None
    if isinstance(index, slice):
        return range(length)[index]
    if isinstance(index, tuple):
        listed = ", ".join(map(repr, index))
        raise TypeError(
            f"{where}: ds[{listed}]: a dataset has one axis; for several samples pass a "
            f"list: ds[[{listed}]]"
        )
    if isinstance(index, str | bytes) or not (
        isinstance(index, Sequence) or hasattr(index, "__array__")
    ):
        raise TypeError(
            f"{where}: ds[...] takes an int, a slice or a 1-D sequence/array of ints, "
            f"not {type(index).__name__}"
        )
    array = np.asarray(index)
    if array.size == 0 and array.ndim == 1:
        return np.zeros(0, np.int64)
    if array.dtype.kind == "b":
        raise TypeError(f"{where}: boolean masks are not supported; use ds[np.flatnonzero(mask)]")
    if array.dtype.kind not in "iu":
        raise TypeError(f"{where}: index values must be integers, got dtype {array.dtype}")
    if array.ndim == 0:  # a 0-d integer array (numpy, jax): one sample
        return None
    if array.ndim != 1:
        raise TypeError(f"{where}: an index array must be 1-D, got shape {array.shape}")
    return array


def _some(episodes: np.ndarray, limit: int = 8) -> str:
    """Episode ids for a message: the distinct ones, at most `limit`."""
    ids = np.unique(episodes).tolist()
    return ", ".join(map(str, ids[:limit])) + (", ..." if len(ids) > limit else "")


def _init_key(camera: str) -> tuple[str, str]:
    """Request key of a camera's init segment (a tuple: no feature name can equal it)."""
    return ("init", camera)


class ReadPlan(NamedTuple):
    """`JaxloadDataset.plan_read`: checked positions and what reading them reads."""

    positions: np.ndarray
    parts: tuple[dict, np.ndarray, dict, dict, dict]  # JaxloadDataset._requests

    def record_keys(self) -> np.ndarray:
        """The (shard, record) pairs read, sorted and unique, shape (n, 2)."""
        return unique_pairs(self.parts[0])[0]


class _FrameRows:
    """The frame blocks a batch needs, decoded into one structured array."""

    def __init__(self, records: list[bytes], slots: Mapping[str, np.ndarray], dtype: np.dtype):
        self._ids = np.unique(np.concatenate([s.ravel() for s in slots.values()]))
        blocks = [records[i] for i in self._ids]
        self._rows = np.frombuffer(b"".join(blocks), dtype=dtype)
        sizes = np.array([len(b) // dtype.itemsize for b in blocks])
        self._first_row = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def get(self, slots: np.ndarray | int, frames: np.ndarray | int) -> np.ndarray:
        """Rows of `frames` (episode frame numbers) stored in the blocks at `slots`."""
        block = self._first_row[np.searchsorted(self._ids, slots)]
        return self._rows[block + np.asarray(frames) % layout.FRAMES_PER_BLOCK]
