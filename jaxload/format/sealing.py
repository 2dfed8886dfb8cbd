"""What a dataset's records are sealed with: a key derived from the converted content.

Every stored record ends with `xxh3_64(payload, seed=record_key(key, shard, record))`
(`jaxload.format.layout.seal_record`). Since format 5 the `key` is `records_key(...)`: a
hash of

- `records.seed`: the conversion's settings (encoding options, shard size, versions);
- `fingerprint`: the content, every record's payload included (`layout.content_fingerprint`);
- `records.metadata_xxh3`: the xxh3_64 of each piece of metadata that says what a record
  holds or where a frame is: `fps`, each feature and each camera of meta/info.json, and the
  columns of meta/episodes.parquet that place frames (`episode_index`, `length`, `tasks`,
  each camera's `segment_starts`, each string feature's vocabulary) and (format 6)
  meta/tasks.parquet (`tasks`: which string each frame's `task_index` names).

So a record or shard of any other conversion fails its checksum whatever its structure
(other content, other fingerprint, other key), and so does every record when
meta/info.json's fingerprint or digests are edited. A field edited without its digest is
named at open: `check_info` (info.json) and `check_table` (episodes.parquet) compare each
field with its digest, so an fps, a feature's shape or a GOP table changed after conversion
is a `DatasetError` naming the file and the field, not data served from the wrong frames.

    metadata = info_digests(fps, features, cameras) | {"episodes": table.digests()}
    key = records_key(seed, fingerprint, metadata)

Digests are over canonical forms (JSON with sorted keys, little-endian int64 columns), so
re-saving info.json with other key order or whitespace changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import xxhash

from jaxload.errors import DatasetError

INFO_FIELDS = ("fps", "features", "cameras")  # the parts of info.json digested
EPISODES = "episodes"  # metadata_xxh3's entry for meta/episodes.parquet's columns
TASKS = "tasks"  # metadata_xxh3's entry for meta/tasks.parquet (format 6)


def json_digest(value: Any) -> str:
    """xxh3_64 (hex) of `value`'s canonical JSON (sorted keys, no whitespace choices)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return xxhash.xxh3_64_hexdigest(text.encode())


def info_digests(
    fps: Any, features: Mapping[str, Mapping[str, Any]], cameras: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The digests of meta/info.json's fields: {"fps": h, "features": {name: h},
    "cameras": {name: h}} (features and cameras as their JSON dicts)."""
    return {
        "fps": json_digest(fps),
        "features": {k: json_digest(dict(v)) for k, v in features.items()},
        "cameras": {k: json_digest(dict(v)) for k, v in cameras.items()},
    }


def records_key(seed: int, fingerprint: str, metadata: Mapping[str, Any]) -> int:
    """The key every record checksum of the dataset is derived from (64 bits)."""
    text = json.dumps(
        {"seed": int(seed), "fingerprint": fingerprint, "metadata_xxh3": metadata},
        sort_keys=True,
        separators=(",", ":"),
    )
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def check_info(where: str, metadata: Any, actual: Mapping[str, Any]) -> None:
    """Raises a DatasetError naming `where` (meta/info.json) and the first field whose
    digest in `metadata` (records.metadata_xxh3) differs from `actual` (`info_digests`)."""
    if not isinstance(metadata, Mapping):
        raise DatasetError(f"{where}: records.metadata_xxh3 missing or not an object")
    for field in INFO_FIELDS:
        _compare(where, field, metadata.get(field), actual[field], "meta/info.json")


def check_table(where: str, metadata: Mapping[str, Any], actual: Mapping[str, str]) -> None:
    """Raises a DatasetError naming `where` (meta/episodes.parquet) and the first column
    whose digest in `metadata[EPISODES]` differs from `actual` (column -> digest)."""
    _compare(where, "column", metadata.get(EPISODES), actual, "meta/episodes.parquet")


def check_tasks(where: str, metadata: Mapping[str, Any] | None, actual: str) -> None:
    """Raises a DatasetError naming `where` (meta/tasks.parquet) unless `actual`
    (`tasks_digest` of the table read) is the digest in `metadata` (records.metadata_xxh3):
    a task string edited, or two swapped, would serve another `task` for every frame."""
    _compare(where, "the task table", (metadata or {}).get(TASKS), actual, "meta/tasks.parquet")


def tasks_digest(index: np.ndarray, tasks: Any) -> str:
    """Digest of meta/tasks.parquet: its `task_index` values in rising order (int64), then
    the task strings in that order (as a list<string> column of one string per row).
    `tasks`: a pyarrow string array or a sequence of str, aligned with `index`."""
    import pyarrow as pa

    values = (
        tasks
        if isinstance(tasks, pa.Array | pa.ChunkedArray)
        else pa.array(list(tasks), pa.string())
    )
    return ints_digest(index) + string_lists_digest(np.ones(len(index), np.int64), values)


def _compare(where: str, field: str, expected: Any, actual: Any, file: str) -> None:
    if isinstance(actual, str):
        if expected != actual:
            raise DatasetError(
                f"{where}: {field} is not what the records were written with (its digest "
                f"differs from meta/info.json's records.metadata_xxh3): {file} was edited "
                "after conversion; restore it or reconvert (`jaxload convert SRC OUT`)"
            )
        return
    if not isinstance(expected, Mapping):
        raise DatasetError(f"{where}: records.metadata_xxh3 has no entry for {field}")
    prefix = "" if field == "column" else f"{field}."
    for name in sorted(set(expected) | set(actual)):
        if name not in actual:
            raise DatasetError(
                f"{where}: {prefix}{name} is missing, but the records were written with it "
                f"({file} was edited after conversion; restore it or reconvert)"
            )
        if name not in expected:
            raise DatasetError(
                f"{where}: {prefix}{name} was not there when the records were written "
                f"({file} was edited after conversion; restore it or reconvert)"
            )
        label = f"column {name}" if field == "column" else f"{prefix}{name}"
        _compare(where, label, expected[name], actual[name], file)


# --- meta/episodes.parquet's columns -------------------------------------------------------
#
# A column's digest is the hex xxh3_64 of each of its canonical parts, concatenated:
#   an integer column: its values as little-endian int64;
#   a list of integers per episode: the list lengths (int64), then the values (int64);
#   a list of strings per episode: the list lengths (int64), each string's UTF-8 size
#   (int64), then the UTF-8 bytes.
# Parts are hashed separately so the converter can stream them, one episode at a time.


def ints_digest(values: np.ndarray) -> str:
    """Digest of an integer column."""
    return _hex(np.ascontiguousarray(values, "<i8"))


def int_lists_digest(counts: np.ndarray, values: np.ndarray) -> str:
    """Digest of a list<int> column: each episode's list length and the values."""
    return _hex(np.ascontiguousarray(counts, "<i8")) + _hex(np.ascontiguousarray(values, "<i8"))


def string_lists_digest(counts: np.ndarray, values: Any) -> str:
    """Digest of a list<string> column: each episode's list length (`counts`) and its
    strings (`values`, a pyarrow string array of them all, in order)."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = pa.concat_arrays(values.chunks) if values.num_chunks else pa.array([], pa.string())
    values = values.cast(pa.large_binary())
    offsets, data = np.zeros(1, "<i8"), b""
    if len(values):
        _, offsets_buffer, data_buffer = values.buffers()
        offsets = np.frombuffer(offsets_buffer, "<i8")[values.offset :][: len(values) + 1]
        if data_buffer is not None:
            data = memoryview(data_buffer)[offsets[0] : offsets[-1]]
    sizes = np.diff(offsets)
    return (
        _hex(np.ascontiguousarray(counts, "<i8"))
        + _hex(np.ascontiguousarray(sizes, "<i8"))
        + xxhash.xxh3_64_hexdigest(data)
    )


def _hex(array: np.ndarray) -> str:
    return xxhash.xxh3_64_hexdigest(memoryview(array).cast("B"))


class TableDigests:
    """The converter's side of the column digests, one episode at a time (the same bytes
    `ints_digest`, `int_lists_digest` and `string_lists_digest` hash over whole columns).

        table = TableDigests(gop_columns, string_columns)  # the list columns' names
        for row in rows:        # meta/episodes.parquet's rows, in order
            table.add(row)
        table.digests()         # {column: digest}
    """

    def __init__(self, gop_columns: Sequence[str], string_columns: Sequence[str]):
        self._ints = {name: xxhash.xxh3_64() for name in ("episode_index", "length")}
        self._int_lists = {name: _parts(2) for name in gop_columns}
        self._string_lists = {name: _parts(3) for name in ("tasks", *string_columns)}

    def add(self, row: Mapping[str, Any]) -> None:
        """Adds one episode's row (a dict with the columns; a missing list is empty)."""
        for name, digest in self._ints.items():
            digest.update(np.array([row[name]], "<i8").tobytes())
        for name, (counts, values) in self._int_lists.items():
            items = row.get(name) or []
            counts.update(np.array([len(items)], "<i8").tobytes())
            values.update(np.asarray(items, "<i8").tobytes())
        for name, (counts, sizes, data) in self._string_lists.items():
            encoded = [s.encode() for s in row.get(name) or []]
            counts.update(np.array([len(encoded)], "<i8").tobytes())
            sizes.update(np.array([len(b) for b in encoded], "<i8").tobytes())
            data.update(b"".join(encoded))

    def digests(self) -> dict[str, str]:
        out = {name: d.hexdigest() for name, d in self._ints.items()}
        for parts in (self._int_lists, self._string_lists):
            out |= {
                name: "".join(p.hexdigest() for p in hashers) for name, hashers in parts.items()
            }
        return out


def _parts(n: int) -> tuple:
    return tuple(xxhash.xxh3_64() for _ in range(n))


def episode_digest(payloads: Iterable[bytes]) -> bytes:
    """sha256 of one episode's record payloads in storage order, each length-prefixed:
    what the content fingerprint's `records` digest is made of (`records_digest`)."""
    digest = hashlib.sha256()
    for payload in payloads:
        digest.update(len(payload).to_bytes(8, "little"))
        digest.update(payload)
    return digest.digest()


def records_digest(episode_digests: Iterable[bytes]) -> str:
    """The fingerprint's digest of every record: sha256 over each episode's
    `episode_digest`, in episode order (independent of shards, units and workers)."""
    digest = hashlib.sha256()
    for one in episode_digests:
        digest.update(one)
    return digest.hexdigest()
