"""What LeRobot v2.x and v3.0 sources share: info.json, episode rows, data-file checks.

A source reader (`lerobot_v3.LeRobotV3Source`, `lerobot_v21.LeRobotV21Source`) reads its
layout's metadata and answers the same questions for the converter and `jaxload doctor`:
which episodes exist, their frames as a pyarrow table, and where each camera's frames
are (a file and a time range in it). Files are reached through `converters.files.Files`,
so the same reader works on a local directory, the hub or an fsspec URL. Every check
raises `SourceError` naming the file and the episode.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxload.converters.files import Files
from jaxload.errors import SourceError

# Columns every LeRobot data file has; they are stored but are not user features.
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


@dataclasses.dataclass(frozen=True)
class Episode:
    """One source episode: its id, frame count, first global `index` and tasks."""

    index: int
    length: int
    start: int  # LeRobot `index` of the first frame (dataset_from_index)
    tasks: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class VideoSpan:
    """Where one episode's frames of one camera are: a file and a time range in it."""

    rel: str  # path relative to the dataset root
    from_timestamp: float
    to_timestamp: float


class LeRobotSource(abc.ABC):
    """A LeRobot dataset of one codebase version, read through `Files`."""

    SUPPORTED_VERSIONS: tuple[str, ...] = ()

    def __init__(self, files: Files):
        self.files = files
        self.info = read_info(files, self.SUPPORTED_VERSIONS)
        self.fps = int(self.info["fps"])
        self.features: dict[str, Any] = self.info["features"]
        self.camera_keys = camera_keys(self.info)  # video and image cameras, sorted
        self.video_keys = video_keys(self.info)
        self.image_keys = image_keys(self.info)
        self.codebase_version = str(self.info["codebase_version"])

    # --- what each layout provides --------------------------------------------------

    @property
    @abc.abstractmethod
    def episode_ids(self) -> list[int]:
        """Episode ids in source order."""

    @abc.abstractmethod
    def episode(self, episode: int) -> Episode: ...

    @abc.abstractmethod
    def data_file(self, episode: int) -> str:
        """Relative path of the parquet file holding the episode's rows."""

    @abc.abstractmethod
    def video_span(self, episode: int, camera: str) -> VideoSpan: ...

    @abc.abstractmethod
    def episode_frames(self, episode: int) -> pa.Table:
        """The data rows of one episode, checked against the episode metadata."""

    @property
    @abc.abstractmethod
    def tasks(self) -> dict[int, str]: ...

    @abc.abstractmethod
    def stats_json(self) -> bytes | None:
        """Contents for the output's meta/stats.json (None: the source has no stats)."""

    @abc.abstractmethod
    def meta_files(self) -> list[str]:
        """The metadata files that define the dataset (hashed into a conversion plan)."""

    @abc.abstractmethod
    def data_file_rows(self) -> dict[str, int]:
        """Each data file with the number of rows its episodes account for."""

    # --- shared -----------------------------------------------------------------------

    def path_of(self, template: str, **fields: Any) -> str:
        """info.json's `template` ("data_path", "video_path") filled with `fields`; a
        SourceError naming info.json and the template when it asks for anything else (a
        positional `{0}`, a field LeRobot does not define, a bad format spec)."""
        text = self.info[template]
        try:
            return str(text).format(**fields)
        except (IndexError, KeyError, ValueError, AttributeError) as e:
            raise SourceError(
                f"{self.files.describe('meta/info.json')}: {template} {text!r} cannot be filled "
                f"({type(e).__name__}: {e}); its fields are named: "
                + ", ".join("{" + k + "}" for k in fields)
            ) from e

    @property
    def root(self) -> str:
        """How messages name the dataset: its directory or URL."""
        return self.files.describe("")

    @property
    def num_episodes(self) -> int:
        return len(self.episode_ids)

    def row(self, episode: int) -> dict[str, Any]:
        """The episode as a dict (length, dataset_from_index, tasks)."""
        ep = self.episode(episode)
        return {
            "episode_index": ep.index,
            "length": ep.length,
            "dataset_from_index": ep.start,
            "dataset_to_index": ep.start + ep.length,
            "tasks": list(ep.tasks),
        }

    def tabular_columns(self, column_names: list[str]) -> list[str]:
        """Columns stored per frame: declared non-camera features, then the index columns."""
        declared = [k for k, f in self.features.items() if f["dtype"] not in CAMERA_DTYPES]
        return [
            *(k for k in declared if k not in INDEX_COLUMNS),
            *(k for k in INDEX_COLUMNS if k in column_names),
        ]

    def data_schema(self, episode: int) -> pa.Schema:
        rel = self.data_file(episode)
        path = self.files.local(rel, f"data file of episode {episode}")
        try:
            return pq.read_schema(path)
        except Exception as e:  # pyarrow raises several types for corrupt files
            raise SourceError(f"{self.files.describe(rel)}: unreadable parquet ({e})") from e

    def camera_size(self, camera: str) -> tuple[int, int]:
        """(height, width) of a camera, whether info.json declares HWC or CHW."""
        feature = self.features[camera]
        shape, names = list(feature["shape"]), feature.get("names") or []
        if "height" in names and "width" in names and len(names) == len(shape):
            return int(shape[names.index("height")]), int(shape[names.index("width")])
        return int(shape[0]), int(shape[1])

    def source_codec(self, camera: str) -> str:
        """The camera's codec in the source: its video codec, or "image" (PNG/JPEG frames
        in the data parquet)."""
        if camera in self.image_keys:
            return "image"
        return str(self.features[camera].get("info", {}).get("video.codec", "unknown"))

    def episode_files(self, episode: int) -> list[str]:
        """The data and video files an episode needs."""
        rels = [self.data_file(episode)]
        rels += [self.video_span(episode, cam).rel for cam in self.video_keys]
        return list(dict.fromkeys(rels))

    def input_bytes(self, episodes: list[int]) -> dict[int, int]:
        """Each episode's share of the bytes of the files it reads (files shared by several
        episodes are split by frame count), for progress rates."""
        frames_in: dict[str, int] = {}
        for ep in self.episode_ids:
            for rel in self.episode_files(ep):
                frames_in[rel] = frames_in.get(rel, 0) + self.episode(ep).length
        return {
            ep: int(
                sum(
                    self.files.size(rel) * self.episode(ep).length / max(frames_in[rel], 1)
                    for rel in self.episode_files(ep)
                )
            )
            for ep in episodes
        }

    def meta_digest(self) -> str:
        """sha256 over the metadata files' names and bytes: changes when the source does."""
        digest = hashlib.sha256()
        for rel in self.meta_files():
            digest.update(rel.encode() + b"\0")
            with open(self.files.local(rel), "rb") as f:  # in pieces: a file may be large
                while piece := f.read(1 << 20):
                    digest.update(piece)
        return digest.hexdigest()

    def read_data_file(self, rel: str, what: str | None = None) -> pa.Table:
        return self.open_data_file(rel, what).table

    def open_data_file(self, rel: str, what: str | None = None) -> DataFile:
        """The data file at `rel`, read once for the episodes converted in a row."""
        return read_data_file(self.files.local(rel, what), self.files.describe(rel))

    def check_episode_rows(self, frames: pa.Table, episode: Episode, rel: str) -> None:
        check_episode_rows(frames, episode, self.files.describe(rel))


# LeRobot feature dtypes that are cameras: "video" (frames in mp4 files) and "image" (one
# PNG/JPEG per frame inside the data parquet). Both become video records.
CAMERA_DTYPES = ("video", "image")


def camera_keys(info: dict[str, Any]) -> list[str]:
    """Every camera key, whatever its name (`image`, `observation.images.top`, ...)."""
    return sorted(k for k, f in info["features"].items() if f.get("dtype") in CAMERA_DTYPES)


def video_keys(info: dict[str, Any]) -> list[str]:
    return sorted(k for k, f in info["features"].items() if f.get("dtype") == "video")


def image_keys(info: dict[str, Any]) -> list[str]:
    return sorted(k for k, f in info["features"].items() if f.get("dtype") == "image")


def read_info(files: Files, supported: tuple[str, ...]) -> dict[str, Any]:
    """meta/info.json, checked for the fields and feature types jaxload needs."""
    info = load_info(files)
    where = files.describe("meta/info.json")
    version = info.get("codebase_version")
    if version not in supported:
        raise SourceError(
            f"{where}: codebase_version {version!r} is not supported "
            f"(supported: {', '.join(supported)})"
        )
    for key in ("fps", "features", "total_frames", "total_episodes", "data_path"):
        if key not in info:
            raise SourceError(f"{where}: required field {key!r} missing")
    if video_keys(info) and not info.get("video_path"):
        raise SourceError(f"{where}: has video features but no 'video_path'")
    for key, feature in info["features"].items():
        _check_feature(key, feature, where)
    return info


def _check_feature(key: str, feature: Any, where: str) -> None:
    """Refuses, with the reason, a feature jaxload cannot carry without changing it."""
    if not isinstance(feature, dict) or "dtype" not in feature or "shape" not in feature:
        raise SourceError(f"{where}: feature {key!r} has no dtype or shape")
    dtype = feature["dtype"]
    if dtype in CAMERA_DTYPES and _is_depth_map(feature):
        raise SourceError(
            f"{where}: feature {key!r} is a depth map (info.is_depth_map); jaxload stores "
            "cameras as 8-bit RGB, which would drop the depth's 12-bit precision, so it "
            "refuses to convert it. Convert without it: select the other cameras upstream"
        )
    if dtype in CAMERA_DTYPES:
        shape, names = list(feature["shape"]), feature.get("names") or []
        channels = shape[names.index("channels")] if "channels" in names else shape[-1]
        if len(shape) != 3 or channels != 3:
            raise SourceError(
                f"{where}: camera {key!r} has shape {shape}; jaxload converts 3-channel "
                "(RGB) cameras only"
            )


def _is_depth_map(feature: dict[str, Any]) -> bool:
    info = feature.get("info") or {}
    return bool(info.get("is_depth_map") or info.get("video.is_depth_map"))


def load_info(files: Files) -> dict[str, Any]:
    """meta/info.json as a dict, or a SourceError saying this is no LeRobot dataset."""
    where = files.describe("meta/info.json")
    if not files.remote and not Path(files.describe("")).is_dir():
        raise SourceError(f"{files.describe('')}: no such dataset directory")
    if not files.exists("meta/info.json"):
        raise SourceError(f"{where}: missing; {files.describe('')} is not a LeRobot dataset")
    try:
        info = json.loads(files.read_bytes("meta/info.json"))
    except (OSError, ValueError) as e:
        raise SourceError(f"{where}: not valid JSON ({e})") from e
    if not isinstance(info, dict):
        raise SourceError(f"{where}: not a JSON object")
    return info


def check_episode_rows(frames: pa.Table, episode: Episode, where: str) -> None:
    ep, length, start = episode.index, episode.length, episode.start
    if frames.num_rows != length:
        raise SourceError(
            f"{where}: episode {ep} should have {length} rows (index {start}"
            f"..{start + length - 1}) but the file holds {frames.num_rows}"
        )
    index = frames["index"].to_numpy()
    if np.any(np.diff(index) != 1):
        raise SourceError(f"{where}: episode {ep}: column 'index' is not sorted and contiguous")
    if length and index[0] != start:
        raise SourceError(
            f"{where}: episode {ep}: first frame has index {index[0]}, expected {start} "
            "(the sum of the lengths of the episodes before it)"
        )
    if np.any(frames["episode_index"].to_numpy() != ep):
        raise SourceError(f"{where}: rows of index {index[0]}..{index[-1]} are not episode {ep}")
    if np.any(frames["frame_index"].to_numpy() != np.arange(length)):
        raise SourceError(f"{where}: episode {ep}: frame_index is not 0..{length - 1}")


class DataFile:
    """A data file's rows, one Arrow chunk per column (lerobot writes a row group per
    episode, and slicing across thousands of chunks costs milliseconds each), with its
    `index` column as numpy: an episode's rows are found by binary search, so reading
    every episode of a file costs time linear in its rows."""

    def __init__(self, table: pa.Table):
        try:
            self.table = table.combine_chunks()
        except pa.ArrowInvalid:  # a column too large for one chunk: slices stay correct
            self.table = table
        self.index = self.table["index"].to_numpy()
        self._sorted = bool(np.all(np.diff(self.index) > 0))

    def rows(self, start: int, length: int) -> pa.Table:
        """The rows whose `index` is in [start, start + length), in file order."""
        if self._sorted:
            first, last = np.searchsorted(self.index, [start, start + length])
            return self.table.slice(int(first), int(last - first))
        rows = np.flatnonzero((self.index >= start) & (self.index < start + length))
        return self.table.take(pa.array(rows))


def read_data_file(path: Path, where: str) -> DataFile:
    """Data files may hold many episodes; a worker converting them in order reads each once
    (kept while its size, mtime and ctime stay: a file fixed in place is read again)."""
    try:
        st = os.stat(path)
    except OSError:
        return _read_data_file(path, where, None)
    return _read_data_file(path, where, (st.st_size, st.st_mtime_ns, st.st_ctime_ns))


@functools.lru_cache(maxsize=2)
def _read_data_file(path: Path, where: str, stamp: tuple[int, int, int] | None) -> DataFile:
    table = read_parquet(path, where)
    for col in ("index", "episode_index", "frame_index", "timestamp"):
        if col not in table.column_names:
            raise SourceError(f"{where}: column {col!r} missing")
    return DataFile(table)


def read_parquet(path: Path, where: str | None = None) -> pa.Table:
    where = where or str(path)
    if not Path(path).is_file():
        raise SourceError(f"{where}: missing")
    try:
        # ParquetFile.read, not read_table: the dataset API read_table goes through costs
        # ~0.3 ms of CPU per row group, and lerobot writes one per episode (a data file of
        # 10,000 episodes: 2.7 s of CPU against 0.5 s).
        with pq.ParquetFile(path) as file:
            return file.read()
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise SourceError(f"{where}: unreadable parquet ({e})") from e
