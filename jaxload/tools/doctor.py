"""`jaxload doctor`: named checks over a dataset, one line each.

A check is a function that raises `JaxloadError` with a message when it fails. Later
checks that need an earlier one's result are skipped (not counted) when it failed.

A dataset at a URL (s3://, gs://, hf://, https://) gets the same checks, read the way the
loader reads it: its metadata read where it lives, every record fetched by byte range through the record
offset index (each index checked against info.json) and verified by its checksum.

What it catches that would otherwise be served as data (format 5): a shard or record of
another conversion (records are keyed by the content: "every shard ..." fails), a GOP table
or another column of meta/episodes.parquet edited after conversion ("episode table"), fps
<= 0 or a feature, camera or fps changed in info.json ("metadata"), a task string edited
or swapped ("tasks", format 6), meta/stats.json edited or not finite ("stats"). Features listed in
another order are no fault: frame rows are laid out by sorted names. A worker killed while
loading and a conversion resumed from stale units are no properties of a dataset: the
loader (`WorkerDiedError`) and the converter's resume plan deal with those.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxload import format as fmt
from jaxload.decode.frames import decode_gops
from jaxload.errors import CorruptRecordError, DatasetError, JaxloadError
from jaxload.format import sealing
from jaxload.format.mp4 import gop_num_frames
from jaxload.format.probe import check_first_records
from jaxload.format.reader import DatasetFiles, read_info, read_tasks
from jaxload.format.shards import open_shard
from jaxload.format.storage import DatasetStorage


@dataclasses.dataclass
class CheckResult:
    name: str
    status: str  # "ok" | "FAIL" | "skip"
    detail: str = ""

    def line(self) -> str:
        return f"[{self.status:>4}] {self.name}" + (f": {self.detail}" if self.detail else "")


def run_checks(checks: Iterable[tuple[str, Callable[[], str | None]]]) -> list[CheckResult]:
    """Runs checks in order; once one fails, the ones that follow are skipped."""
    results, failed = [], None
    for name, check in checks:
        if failed is not None:
            results.append(CheckResult(name, "skip", f"needs: {failed}"))
            continue
        try:
            results.append(CheckResult(name, "ok", check() or ""))
        except JaxloadError as e:
            results.append(CheckResult(name, "FAIL", str(e)))
            failed = name
    return results


def is_jaxload_dataset(path: str | os.PathLike) -> bool:
    info = Path(path) / fmt.INFO_PATH
    if not info.is_file():
        return False
    try:
        raw = json.loads(info.read_text())
    except ValueError:
        return False
    return isinstance(raw, dict) and raw.get("format") == fmt.FORMAT_NAME


def check_dataset(
    path: str | os.PathLike, storage_options: Mapping[str, Any] | None = None
) -> list[CheckResult]:
    """Checks a converted jaxload dataset end to end (it reads every record once); `path`
    may be a URL, read with `storage_options` (module docstring)."""
    from jaxload.storage.object_store import open_storage

    return _check(open_storage(path, storage_options=storage_options))


def _check(storage: DatasetStorage) -> list[CheckResult]:
    state: dict = {}

    def metadata():
        info = state["info"] = read_info(storage)
        return (
            f"format version {info.format_version} (records keyed by content), "
            f"{info.total_episodes} episodes, fps {info.fps}; fps, features and cameras are "
            "what the records were written with (frame rows by sorted feature names)"
        )

    def episodes():
        # The reader checks the table against info.json (episode and frame totals, shards,
        # record offsets, GOP tables).
        state["files"] = DatasetFiles(storage, check_records=False)  # shards: every record
        return f"{state['info'].total_frames} frames; GOP tables as the records were written"

    def tasks():
        return f"{len(read_tasks(storage))} tasks, as the records were written"

    def stats():
        return _check_stats(storage)

    def shards():
        read = _read_all_records if storage.local_path is not None else _fetch_all_records
        state["records"] = read(state["files"])
        check_first_records(state["files"])  # what info.json says they hold
        return f"{state['info'].num_shards} shards, every record matches its checksum"

    def frames():
        _check_frame_records(state["files"], state["records"])
        return "index sorted, frame_index and episode_index consistent"

    def video():
        n = _check_segments(state["files"], state["records"])
        return f"{n} segments decode to the expected frame counts"

    def fingerprint():
        info, ep = state["info"], state["files"].episodes
        actual = fmt.content_fingerprint(
            info.fps,
            info.features,
            info.cameras,
            list(zip(ep.index, ep.length, ep.tasks, strict=True)),
            _records_digest(state["files"], state["records"]),
            ep.strings,
        )
        if actual != info.fingerprint:
            raise DatasetError(
                f"{storage.name}: content does not match its fingerprint (records changed "
                "after conversion?)"
            )
        return actual[:16]

    return run_checks(
        [
            ("metadata loads and format version is supported", metadata),
            ("episode table matches info.json", episodes),
            ("tasks table loads", tasks),
            ("every shard exists and holds the records the episode table implies", shards),
            ("frame records are consistent", frames),
            ("every video segment decodes", video),
            ("content matches fingerprint", fingerprint),
            ("normalization stats are the converted ones", stats),
        ]
    )


def _check_stats(storage: DatasetStorage) -> str:
    """meta/stats.json and its sketch as info.json's digests say, every entry finite with
    std >= 0 and its feature's shape (`load_stats`); the tabular features' stats are
    computed again from the records and must be the stored ones."""
    from jaxload.stats import compute_stats, load_stats

    stored = load_stats(storage)
    again = compute_stats([storage], keys=[k for k in stored if k in _numeric(storage)])
    for key, entry in again.items():
        if entry.to_json() != stored[key].to_json():
            raise DatasetError(
                f"{storage.where(fmt.STATS_PATH)}: {key} is not what the records hold "
                "(its stats computed again differ); restore the file or reconvert"
            )
    return f"{len(stored)} keys; {len(again)} tabular ones computed again from the records"


def _numeric(storage: DatasetStorage) -> set[str]:
    info = read_info(storage)
    return {k for k, f in info.features.items() if not f.is_string}


def _read_all_records(files: DatasetFiles) -> dict[int, list[bytes]]:
    """Every record's payload of every shard, checked to be exactly the records the
    episode table implies and to match its checksum."""
    expected = _expected_records(files)
    records = {}
    for shard in range(files.info.num_shards):
        path = files.storage.where(fmt.shard_path(shard))
        reader = open_shard(path)
        try:
            records[shard] = reader.read_all()
            reader.close()  # array_record reports some corruption only when closing
        except Exception as e:  # array_record raises RuntimeError/ValueError on corruption
            raise DatasetError(f"{path}: corrupt shard ({e})") from e
        if len(records[shard]) != expected.get(shard, 0):
            raise DatasetError(
                f"{path}: holds {len(records[shard])} records, the episode table implies "
                f"{expected.get(shard, 0)}"
            )
        if files.info.checked:
            records[shard] = _unsealed(files, shard, records[shard], path)
    return records


def _expected_records(files: DatasetFiles) -> dict[int, int]:
    """Records per shard that the episode table implies (its rows' last records)."""
    ep, expected = files.episodes, {}
    for row in range(len(ep)):
        shard = int(ep.shard[row])
        expected[shard] = max(expected.get(shard, 0), ep.records_end(row))
    return expected


def _fetch_all_records(files: DatasetFiles) -> dict[int, list[bytes]]:
    """`_read_all_records` for a dataset at a URL: each shard's offset index (checked
    against info.json by the store) must list exactly the records the episode table
    implies; every record is fetched by byte range and verified."""
    expected, info = _expected_records(files), files.info
    records = {}
    for shard in range(info.num_shards):
        path = files.storage.where(fmt.shard_path(shard))
        count = int(info.shard_records[shard])
        if count != expected.get(shard, 0):
            raise DatasetError(
                f"{path}: holds {count} records, the episode table implies {expected.get(shard, 0)}"
            )
        records[shard] = files.readers.read(shard, range(count))
    return records


def _records_digest(files: DatasetFiles, records: dict[int, list[bytes]]) -> str:
    """The fingerprint's digest of every record payload, episode by episode."""
    ep = files.episodes
    return sealing.records_digest(
        sealing.episode_digest(
            records[int(ep.shard[row])][int(ep.frames_record_start[row]) : ep.records_end(row)]
        )
        for row in range(len(ep))
    )


def _unsealed(files: DatasetFiles, shard: int, stored: list[bytes], path: str) -> list[bytes]:
    payloads = []
    for number, data in enumerate(stored):
        payload = fmt.unseal_record(data, files.info.records_key, shard, number)
        if payload is None:
            raise CorruptRecordError(
                f"{path}: record {number} ({files.episodes.locate(shard, number)}) does not "
                "match its checksum (damaged, changed after conversion, or another "
                "conversion's)"
            )
        payloads.append(payload)
    return payloads


def _check_frame_records(files: DatasetFiles, records: dict[int, list[bytes]]) -> None:
    dtype, ep = files.info.frame_dtype, files.episodes
    previous_index = None
    for row in range(len(ep)):
        blocks = ep.frame_records(row)
        run = records[int(ep.shard[row])][blocks.start : blocks.stop]
        where, length, episode = ep.where(row), int(ep.length[row]), int(ep.index[row])
        try:
            frames = np.frombuffer(b"".join(run), dtype=dtype)
        except ValueError as e:
            raise DatasetError(
                f"{where}: frame records do not match the feature layout ({e})"
            ) from e
        if len(frames) != length:
            raise DatasetError(f"{where}: {len(frames)} frame rows, expected {length}")
        if "frame_index" in frames.dtype.names and np.any(
            frames["frame_index"] != np.arange(length)
        ):
            raise DatasetError(f"{where}: frame_index is not 0..{length - 1}")
        if "episode_index" in frames.dtype.names and np.any(frames["episode_index"] != episode):
            raise DatasetError(f"{where}: frames carry another episode_index")
        if "index" in frames.dtype.names:
            index = frames["index"]
            if np.any(np.diff(index) != 1) or (
                previous_index is not None and index[0] <= previous_index
            ):
                raise DatasetError(f"{where}: index is not sorted")
            previous_index = index[-1]


def _check_segments(files: DatasetFiles, records: dict[int, list[bytes]]) -> int:
    """Every GOP record holds the frames its segment table implies, and decodes."""
    ep, count = files.episodes, 0
    for row in range(len(ep)):
        shard = records[int(ep.shard[row])]
        for cam, camera in files.info.cameras.items():
            init, *segments = (shard[r] for r in ep.camera_records(row, cam))
            for k, segment in enumerate(segments):
                where = f"{ep.where(row)}, camera {cam}, segment {k}"
                expected = files.gop_length(row, cam, k)
                try:
                    n = gop_num_frames(segment)
                    decode_gops(
                        init, [segment], [[n - 1]], camera.codec, camera.width, camera.height
                    )
                except Exception as e:  # torchcodec/PyAV raise RuntimeError or their own errors
                    raise DatasetError(f"{where}: does not decode ({e})") from e
                if n != expected:
                    raise DatasetError(f"{where}: holds {n} frames, expected {expected}")
                count += 1
    return count
