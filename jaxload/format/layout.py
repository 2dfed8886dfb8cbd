"""The on-disk jaxload dataset layout: paths, metadata schema and record numbering.

Everything the reader and the converter must agree on lives here; `docs/FORMAT.md` is its
prose description. A dataset directory holds:

    meta/info.json          format version, fps, tabular features, cameras, fingerprint
    meta/episodes.parquet   one row per episode: length, tasks, shard, record offsets,
                            per-camera segment tables
    meta/tasks.parquet      task_index -> task string
    meta/stats.json         normalization statistics
    data/shard-NNNNN.array_record

Within a shard, an episode is a contiguous run of records: one record per block of
FRAMES_PER_BLOCK frames holding all tabular features (packed numpy structured rows), then,
per camera in sorted key order, the camera's mp4 init segment and one record per GOP (an
mp4 fragment; jaxload/format/mp4.py). `jaxload.format.reader` reads it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xxhash import xxh3_64_intdigest

from jaxload.errors import DatasetError
from jaxload.format import sealing

FORMAT_NAME = "jaxload"
# 6: the record key also covers meta/tasks.parquet (`records.metadata_xxh3.tasks`), and
# info.json holds the digests of meta/stats.json and its sketch (`stats_xxh3`), checked
# when the stats are read: a task string or a statistic edited after conversion is refused.
# 5: records are keyed by the converted content: the checksum key is derived from the
# content fingerprint and the digests of the metadata that says what a record holds
# (`jaxload.format.sealing`), and frame rows lay the features out in sorted name order.
# 4: each shard has a record offset index beside it (`offsets_path`): the byte range of
# every record's chunk, so remote readers fetch single records (jaxload.storage.remote).
# 3: every record ends with an 8-byte xxh3_64 checksum keyed by its position, verified on
# every read. 2: GOP records are mp4 fragments after a per-camera init record (1: packed
# Annex-B packets, remuxed on every read).
FORMAT_VERSION = 6
# Versions this reader reads. Older ones are refused with a message saying to reconvert:
# up to 4 their records were keyed by the source's metadata, not by their content (a record
# of another conversion of the same source passed their checks); 5 covered neither
# meta/tasks.parquet nor meta/stats.json (an edited task or mean was served silently).
READABLE_VERSIONS = (6,)
# The first version with record offset indexes (remote reads).
OFFSETS_VERSION = 4

# Record checksum: xxh3_64 of the payload with a seed mixing the dataset's record seed and
# the record's (shard, number), appended little-endian. A flipped bit, a truncated record
# and a valid record served from another position or another conversion all fail it.
RECORD_CHECK = "xxh3_64"
RECORD_CHECK_BYTES = 8

INFO_PATH = "meta/info.json"
EPISODES_PATH = "meta/episodes.parquet"
TASKS_PATH = "meta/tasks.parquet"
STATS_PATH = "meta/stats.json"
DATA_DIR = "data"

# array-record changed its defaults between versions: always spell the options out.
# group_size:1 makes every record its own chunk, so a read touches only that record; zstd:3
# with window_log:20 and no padding per chunk are array-record 0.8's defaults, written out
# (same bytes). Padding every chunk to 64 KiB would cost up to 64 KiB per record; the
# footer and postscript are padded whatever the options say (docs/CONVERT.md, Sizes).
WRITER_OPTIONS = "group_size:1,zstd:3,window_log:20,pad_to_block_boundary:false"
# No readahead: samples are random access; readahead would read bytes nobody asked for.
READER_OPTIONS = "readahead_buffer_size:0"

# Tabular rows are stored in blocks of this many frames per record: a record read costs
# ~11 us and >= 0.6 KB of I/O whatever its size, so a 16-frame window reads 1-2 blocks
# instead of 16 records (docs/FORMAT.md has the measurements).
FRAMES_PER_BLOCK = 32


def shard_path(index: int) -> str:
    """Path of shard `index`, relative to the dataset root."""
    return f"{DATA_DIR}/shard-{index:05d}.array_record"


def offsets_path(index: int) -> str:
    """Path of shard `index`'s record offset index (format 4), relative to the dataset root:
    little-endian uint64, each record's first byte in the shard, then the end of the last
    record (`jaxload.format.chunks`)."""
    return f"{DATA_DIR}/shard-{index:05d}.offsets"


def record_key(seed: int, shard: int, record: int) -> int:
    """The xxh3 seed of record `record` of shard `shard` (records < 2**40 per shard)."""
    return (seed ^ (shard << 40) ^ record) & 0xFFFF_FFFF_FFFF_FFFF


def seal_record(payload: bytes, seed: int, shard: int, record: int) -> bytes:
    """The stored form of a record: its payload and its position-keyed checksum."""
    check = xxh3_64_intdigest(payload, seed=record_key(seed, shard, record))
    return payload + check.to_bytes(RECORD_CHECK_BYTES, "little")


def unseal_record(stored: bytes, seed: int, shard: int, record: int) -> bytes | None:
    """The payload of a stored record, or None when its checksum does not match."""
    if len(stored) < RECORD_CHECK_BYTES:
        return None
    view = memoryview(stored)  # hash without copying the payload first
    check = xxh3_64_intdigest(view[:-RECORD_CHECK_BYTES], seed=record_key(seed, shard, record))
    if int.from_bytes(view[-RECORD_CHECK_BYTES:], "little") != check:
        return None
    return stored[:-RECORD_CHECK_BYTES]


def segment_column(camera: str, field: str) -> str:
    """Name of a per-camera column in meta/episodes.parquet."""
    return f"videos/{camera}/{field}"


def strings_column(feature: str) -> str:
    """Name of a string feature's per-episode vocabulary column in meta/episodes.parquet."""
    return f"strings/{feature}"


# An episode's records of one camera start at its `record_start` column: the mp4 init
# segment, then one fragment per GOP.
def camera_record_count(num_segments: int) -> int:
    """Records of one episode's camera with `num_segments` GOPs (init segment included)."""
    return 1 + num_segments


def segment_record(record_start: Any, segment: Any) -> Any:
    """Record number of GOP `segment` (int or array) of a camera whose run starts at
    `record_start` (its init segment)."""
    return record_start + 1 + segment


# A string feature (a language annotation, per-frame text) is stored in the frame record
# as this index into its episode's vocabulary: the `strings/<key>` list column of
# meta/episodes.parquet (strings repeat within an episode; the records stay fixed-size).
STRING = "string"
STRING_INDEX_DTYPE = "uint32"


@dataclasses.dataclass(frozen=True)
class Feature:
    """A tabular feature: stored once per frame in the frame record."""

    dtype: str  # a numpy dtype name, or STRING
    shape: tuple[int, ...]
    names: Any = None

    @property
    def is_string(self) -> bool:
        return self.dtype == STRING

    @property
    def stored_dtype(self) -> np.dtype:
        return np.dtype(STRING_INDEX_DTYPE if self.is_string else self.dtype)

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "names": self.names}


@dataclasses.dataclass(frozen=True)
class Camera:
    """A video stream: one per camera key, stored as self-contained GOP segments."""

    codec: str  # "h264" | "hevc"
    height: int
    width: int
    pix_fmt: str
    gop: int | None  # fixed GOP length, or None for a copied stream with variable GOPs
    crf: int | None
    source_codec: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Contents of meta/info.json."""

    fps: int
    total_frames: int
    total_episodes: int
    features: dict[str, Feature]
    cameras: dict[str, Camera]
    num_shards: int
    fingerprint: str
    source: dict[str, Any]
    converter: dict[str, Any]
    format_version: int = FORMAT_VERSION
    # Per-record checks (version 3): the seed, and each shard's record count.
    record_seed: int | None = None
    shard_records: tuple[int, ...] = ()
    # Format 4: the xxh3_64 (hex) of each shard's offset index file.
    offsets_xxh3: tuple[str, ...] = ()
    # Format 5: the digests of the metadata the records are keyed by (`sealing`).
    metadata_xxh3: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)
    # Format 6: {"meta/stats.json": h, "meta/stats_sketch.npz": h} (`jaxload.stats.store`).
    stats_xxh3: Mapping[str, str] | None = dataclasses.field(default=None, hash=False)

    @functools.cached_property
    def records_key(self) -> int:
        """The key of every record checksum (`record_key(records_key, shard, record)`):
        derived from records.seed, the fingerprint and the metadata digests (format 5)."""
        return sealing.records_key(self.record_seed, self.fingerprint, self.metadata_xxh3 or {})

    @property
    def frame_dtype(self) -> np.dtype:
        return frame_dtype(self.features)

    @property
    def checked(self) -> bool:
        """Whether records carry checksums (format version 3 and later)."""
        return self.record_seed is not None

    def to_json(self) -> dict[str, Any]:
        return (
            {
                "format": FORMAT_NAME,
                "format_version": self.format_version,
                "fps": self.fps,
                "total_frames": self.total_frames,
                "total_episodes": self.total_episodes,
                "features": {k: f.to_json() for k, f in self.features.items()},
                "cameras": {k: c.to_json() for k, c in self.cameras.items()},
                "num_shards": self.num_shards,
                "fingerprint": self.fingerprint,
                "source": self.source,
                "converter": self.converter,
            }
            | self._records_json()
            | ({"stats_xxh3": dict(self.stats_xxh3)} if self.stats_xxh3 else {})
        )

    def _records_json(self) -> dict[str, Any]:
        if not self.checked:
            return {}
        records = {
            "checksum": RECORD_CHECK,
            "seed": self.record_seed,
            "per_shard": list(self.shard_records),
        }
        if self.offsets_xxh3:
            records["offsets_xxh3"] = list(self.offsets_xxh3)
        if self.metadata_xxh3 is not None:
            records["metadata_xxh3"] = self.metadata_xxh3
        return {"records": records}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], where: str) -> DatasetInfo:
        """info.json's fields, checked: the format version, each field's type and range
        (`fps` > 0, dtypes, shapes, frame sizes) and (format 5) that fps, features and
        cameras are what the records were written with. A DatasetError names the field."""
        if not isinstance(raw, Mapping):
            raise DatasetError(f"{where}: holds a JSON {type(raw).__name__}, not an object")
        if raw.get("format") != FORMAT_NAME:
            raise DatasetError(f"{where}: not a jaxload dataset (format={raw.get('format')!r})")
        version = raw.get("format_version")
        if isinstance(version, int) and version < min(READABLE_VERSIONS):
            raise DatasetError(
                f"{where}: format_version {version} was written by an older jaxload, whose "
                "checksums do not cover all of the converted content and metadata; this "
                "jaxload reads "
                f"version {FORMAT_VERSION}: reconvert the source (`jaxload convert SRC OUT`)"
            )
        if version not in READABLE_VERSIONS:
            raise DatasetError(
                f"{where}: format_version {version} is not supported by this jaxload "
                f"(reads versions {list(READABLE_VERSIONS)}); reconvert with `jaxload convert`"
            )
        check_fields(raw, where)
        try:
            records = raw["records"] if version >= 3 else {}
            if version >= 3 and records.get("checksum") != RECORD_CHECK:
                raise ValueError(f"records.checksum {records.get('checksum')!r}")
            indexes = records.get("offsets_xxh3")
            if indexes is not None and len(indexes) != int(raw["num_shards"]):
                raise ValueError("records.offsets_xxh3 must have one entry per shard")
            info = cls(
                fps=int(raw["fps"]),
                total_frames=int(raw["total_frames"]),
                total_episodes=int(raw["total_episodes"]),
                features={
                    k: Feature(v["dtype"], tuple(v["shape"]), v.get("names"))
                    for k, v in raw["features"].items()
                },
                cameras={k: Camera(**v) for k, v in raw["cameras"].items()},
                num_shards=int(raw["num_shards"]),
                fingerprint=str(raw["fingerprint"]),
                source=dict(raw.get("source", {})),
                converter=dict(raw.get("converter", {})),
                format_version=int(version),
                record_seed=int(records["seed"]) if version >= 3 else None,
                shard_records=tuple(int(n) for n in records.get("per_shard", ())),
                offsets_xxh3=tuple(str(h) for h in records.get("offsets_xxh3", ())),
                metadata_xxh3=records.get("metadata_xxh3"),
                stats_xxh3=raw.get("stats_xxh3"),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise DatasetError(f"{where}: malformed metadata ({type(e).__name__}: {e})") from e
        sealing.check_info(where, info.metadata_xxh3, info.digests())
        return info

    def digests(self) -> dict[str, Any]:
        """The digests of fps, features and cameras (`sealing.info_digests`)."""
        features = {k: f.to_json() for k, f in self.features.items()}
        return sealing.info_digests(
            self.fps, features, {k: c.to_json() for k, c in self.cameras.items()}
        )


def with_metadata_digests(
    info: DatasetInfo, rows: Iterable[Mapping[str, Any]], tasks: Mapping[int, str] | None = None
) -> DatasetInfo:
    """`info` with records.metadata_xxh3 for its fields, the meta/episodes.parquet `rows`
    (dicts of its columns) and meta/tasks.parquet's `tasks` (task_index -> task): what a
    dataset's record key is derived from (format 6; the converter streams the same
    digests, `jaxload.converters.content`)."""
    strings = [strings_column(k) for k, f in info.features.items() if f.is_string]
    gops = [segment_column(c, "segment_starts") for c in info.cameras]
    table = sealing.TableDigests(gops, strings)
    for row in rows:
        table.add(row)
    digests = info.digests() | {sealing.EPISODES: table.digests()}
    if tasks is not None:
        order = sorted(tasks)
        digests[sealing.TASKS] = sealing.tasks_digest(
            np.array(order, np.int64), [tasks[i] for i in order]
        )
    return dataclasses.replace(info, metadata_xxh3=digests)


def frame_dtype(features: Mapping[str, Feature]) -> np.dtype:
    """The packed structured dtype of one frame record (little-endian, no padding): the
    features in sorted name order, whatever the order of info.json's `features` object
    (a JSON object's order is no contract: `json.dump(..., sort_keys=True)` changes it)."""
    fields = [(k, features[k].stored_dtype.newbyteorder("<"), features[k].shape)
              for k in sorted(features)]  # fmt: skip
    return np.dtype(fields)


_CAMERA_INTS = {"height": 1, "width": 1}  # field -> smallest value


def check_fields(raw: Mapping[str, Any], where: str) -> None:
    """Raises a DatasetError naming `where` and the field unless fps is an integer > 0,
    every feature has a known dtype and a shape of integers >= 0, and every camera a
    frame size of integers >= 1 (values that would otherwise fail deep in numpy or the
    decoder, or serve windows at the wrong frames)."""

    def bad(field: str, value: Any, wanted: str) -> DatasetError:
        return DatasetError(
            f"{where}: {field} is {value!r}; {wanted} (restore info.json or reconvert)"
        )

    def integer(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    fps = raw.get("fps")
    if not integer(fps) or fps <= 0:
        raise bad("fps", fps, "it must be an integer > 0 (frames per second)")
    for section in ("features", "cameras"):
        if not isinstance(raw.get(section), Mapping):
            raise bad(section, raw.get(section), "it must be an object")
        for key, value in raw[section].items():
            if not isinstance(value, Mapping):
                raise bad(f"{section}.{key}", value, "it must be an object")
    for key, feature in raw["features"].items():
        dtype, shape = feature.get("dtype"), feature.get("shape")
        if dtype != STRING:
            try:
                ok = isinstance(dtype, str) and np.dtype(dtype).kind in "biuf"
            except Exception:  # numpy raises TypeError, ValueError, SyntaxError for bad names
                ok = False
            if not ok:
                raise bad(
                    f"features.{key}.dtype", dtype, "it must be a numeric numpy dtype or 'string'"
                )
        if not isinstance(shape, list) or not all(integer(n) and n >= 0 for n in shape):
            raise bad(f"features.{key}.shape", shape, "it must be a list of integers >= 0")
    for key, camera in raw["cameras"].items():
        for field, low in _CAMERA_INTS.items():
            value = camera.get(field)
            if not integer(value) or value < low:
                raise bad(f"cameras.{key}.{field}", value, f"it must be an integer >= {low}")


def content_fingerprint(
    fps: int,
    features: Mapping[str, Feature],
    cameras: Mapping[str, Camera],
    episodes: Iterable[tuple[int, int, Sequence[str]]],
    records_sha256: str,
    strings: Mapping[str, Iterable[Sequence[str]]] | None = None,
) -> str:
    """Identifies a dataset's content: its schema, episodes (id, length, tasks), the
    per-episode vocabularies of string features and the sha256 of every record in shard
    order. Independent of paths and library versions.

    It is the sha256 of the canonical JSON (sorted keys) of {"fps", "features", "cameras",
    "episodes": [[id, length, tasks], ...], "records"[, "strings": {key: [[...], ...]}]}
    ("strings" only with string features: older fingerprints stay valid), hashed as it is
    written: `episodes` and each `strings[key]` are iterated once, never held."""
    digest = hashlib.sha256()

    def put(text: str) -> None:
        digest.update(text.encode())

    def items(values: Iterable[Any]) -> None:
        put("[")
        for i, value in enumerate(values):
            put((", " if i else "") + json.dumps(value, sort_keys=True))
        put("]")

    put('{"cameras": ' + json.dumps({k: c.to_json() for k, c in cameras.items()}, sort_keys=True))
    put(', "episodes": ')
    items([int(e), int(n), list(t)] for e, n, t in episodes)
    put(
        ', "features": ' + json.dumps({k: f.to_json() for k, f in features.items()}, sort_keys=True)
    )
    put(f', "fps": {json.dumps(fps)}, "records": {json.dumps(records_sha256)}')
    if strings:
        put(', "strings": {')
        for i, key in enumerate(sorted(strings)):
            put((", " if i else "") + json.dumps(key) + ": ")
            items(list(v) for v in strings[key])
        put("}")
    put("}")
    return digest.hexdigest()


def hash_record(digest, record: bytes) -> None:
    """Adds one record to a running sha256, length-prefixed so boundaries count."""
    digest.update(len(record).to_bytes(8, "little"))
    digest.update(record)


def num_blocks(length: int) -> int:
    """Frame-block records of an episode of `length` frames."""
    return -(-length // FRAMES_PER_BLOCK)


def parse_info(data: bytes, where: str, root: str) -> DatasetInfo:
    """meta/info.json's bytes (read from `where`, the dataset at `root`) parsed and
    validated; a LeRobot dataset's info.json is said to be one."""
    try:
        raw = json.loads(data)
    except ValueError as e:
        raise DatasetError(f"{where}: unreadable ({e})") from e
    if not isinstance(raw, dict):
        raise DatasetError(f"{where}: not a JSON object (a JSON {type(raw).__name__})")
    if raw.get("format") != FORMAT_NAME and "codebase_version" in raw:
        raise DatasetError(
            f"{root} is a LeRobot dataset ({raw['codebase_version']}), not a jaxload dataset: "
            f"convert it first with `jaxload convert {root} OUT`"
        )
    return DatasetInfo.from_json(raw, where)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Writes JSON so readers see the old file or the new one, never a torn one."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Writes `data` so readers see the old file or the new one, never a torn one. A unique
    temp name per writer makes concurrent writers safe: each replaces atomically."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def episodes_table(
    rows: Sequence[dict[str, Any]], cameras: Sequence[str], strings: Sequence[str] = ()
) -> Any:
    """meta/episodes.parquet with an explicit schema (rows may come back from JSON).
    `strings`: the string features, each with its per-episode vocabulary column."""
    import pyarrow as pa

    fields = [
        ("episode_index", pa.int64()),
        ("length", pa.int64()),
        ("dataset_from_index", pa.int64()),
        ("tasks", pa.list_(pa.string())),
        ("shard", pa.int64()),
        ("frames_record_start", pa.int64()),
    ]
    for cam in cameras:
        fields += [
            (segment_column(cam, "record_start"), pa.int64()),
            (segment_column(cam, "segment_starts"), pa.list_(pa.int64())),
            (segment_column(cam, "psnr_min"), pa.float64()),
        ]
    fields += [(strings_column(key), pa.list_(pa.string())) for key in strings]
    schema = pa.schema(fields)
    return pa.Table.from_pylist([{k: r[k] for k in schema.names} for r in rows], schema=schema)


__all__ = [
    "DATA_DIR",
    "EPISODES_PATH",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "FRAMES_PER_BLOCK",
    "INFO_PATH",
    "OFFSETS_VERSION",
    "READABLE_VERSIONS",
    "READER_OPTIONS",
    "RECORD_CHECK",
    "RECORD_CHECK_BYTES",
    "STATS_PATH",
    "STRING",
    "TASKS_PATH",
    "WRITER_OPTIONS",
    "Camera",
    "DatasetInfo",
    "Feature",
    "camera_record_count",
    "check_fields",
    "content_fingerprint",
    "episodes_table",
    "frame_dtype",
    "hash_record",
    "num_blocks",
    "offsets_path",
    "parse_info",
    "record_key",
    "seal_record",
    "segment_column",
    "segment_record",
    "shard_path",
    "strings_column",
    "unseal_record",
    "with_metadata_digests",
    "write_bytes_atomic",
    "write_json_atomic",
]
