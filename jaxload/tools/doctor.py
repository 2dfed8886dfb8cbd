"""`jaxload doctor`: named checks over a dataset, one line each.

A check is a function that raises `JaxloadError` with a message when it fails. Later
checks that need an earlier one's result are skipped (not counted) when it failed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from array_record.python.array_record_module import ArrayRecordReader

from jaxload import format as fmt
from jaxload.errors import DatasetError, JaxloadError
from jaxload.decode.frames import decode_gops
from jaxload.format.mp4 import gop_num_frames


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
        return json.loads(info.read_text()).get("format") == fmt.FORMAT_NAME
    except ValueError:
        return False


def check_dataset(path: str | os.PathLike) -> list[CheckResult]:
    """Checks a converted jaxload dataset end to end (it reads every record once)."""
    root = Path(path)
    state: dict = {}

    def metadata():
        state["info"] = fmt.read_info(root)
        return f"format version {fmt.FORMAT_VERSION}, {state['info'].total_episodes} episodes"

    def episodes():
        table = _read(root / fmt.EPISODES_PATH)
        info = state["info"]
        lengths = table["length"].to_numpy()
        if len(lengths) != info.total_episodes or int(lengths.sum()) != info.total_frames:
            raise DatasetError(
                f"{root / fmt.EPISODES_PATH}: {len(lengths)} episodes / {int(lengths.sum())} "
                f"frames, but meta/info.json says {info.total_episodes} / {info.total_frames}"
            )
        state["episodes"] = table
        return f"{info.total_frames} frames"

    def tasks():
        table = _read(root / fmt.TASKS_PATH)
        known = set(table["task_index"].to_pylist())
        return f"{len(known)} tasks"

    def shards():
        state["records"] = _read_all_records(root, state["info"], state["episodes"])
        return f"{state['info'].num_shards} shards"

    def frames():
        _check_frame_records(root, state["info"], state["episodes"], state["records"])
        return "index sorted, frame_index and episode_index consistent"

    def video():
        n = _check_segments(root, state["info"], state["episodes"], state["records"])
        return f"{n} segments decode to the expected frame counts"

    def fingerprint():
        digest = hashlib.sha256()
        for shard in sorted(state["records"]):
            for record in state["records"][shard]:
                fmt.hash_record(digest, record)
        info = state["info"]
        rows = state["episodes"].select(["episode_index", "length", "tasks"]).to_pylist()
        actual = fmt.content_fingerprint(
            info.fps,
            info.features,
            info.cameras,
            [(r["episode_index"], r["length"], r["tasks"]) for r in rows],
            digest.hexdigest(),
        )
        if actual != info.fingerprint:
            raise DatasetError(
                f"{root}: content does not match its fingerprint (records changed after "
                "conversion?)"
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
        ]
    )


def _read(path: Path):
    if not path.is_file():
        raise DatasetError(f"{path}: missing")
    try:
        return pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DatasetError(f"{path}: unreadable parquet ({e})") from e


def _read_all_records(root: Path, info: fmt.DatasetInfo, table) -> dict[int, list[bytes]]:
    expected: dict[int, int] = {}
    for row in table.to_pylist():
        end = row["frames_record_start"] + fmt.num_blocks(row["length"])
        for cam in info.cameras:
            start = row[fmt.segment_column(cam, "record_start")]
            segments = len(row[fmt.segment_column(cam, "segment_starts")])
            end = max(end, start + fmt.camera_record_count(segments))
        expected[row["shard"]] = max(expected.get(row["shard"], 0), end)
    records = {}
    for shard in range(info.num_shards):
        path = root / fmt.shard_path(shard)
        if not path.is_file():
            raise DatasetError(f"{path}: missing")
        try:
            reader = ArrayRecordReader(str(path), fmt.READER_OPTIONS)
            records[shard] = reader.read_all()
            reader.close()
        except Exception as e:  # array_record raises RuntimeError/ValueError on corruption
            raise DatasetError(f"{path}: corrupt shard ({e})") from e
        if len(records[shard]) != expected.get(shard, 0):
            raise DatasetError(
                f"{path}: holds {len(records[shard])} records, the episode table implies "
                f"{expected.get(shard, 0)}"
            )
    return records


def _check_frame_records(root: Path, info: fmt.DatasetInfo, table, records) -> None:
    dtype = info.frame_dtype
    previous_index = None
    for row in table.to_pylist():
        run = records[row["shard"]][row["frames_record_start"] :][: fmt.num_blocks(row["length"])]
        try:
            frames = np.frombuffer(b"".join(run), dtype=dtype)
        except ValueError as e:
            raise DatasetError(
                f"{root / fmt.shard_path(row['shard'])}: episode {row['episode_index']}: "
                f"frame records do not match the feature layout ({e})"
            ) from e
        where = f"{root / fmt.shard_path(row['shard'])}: episode {row['episode_index']}"
        if len(frames) != row["length"]:
            raise DatasetError(f"{where}: {len(frames)} frame rows, expected {row['length']}")
        if "frame_index" in frames.dtype.names and np.any(
            frames["frame_index"] != np.arange(row["length"])
        ):
            raise DatasetError(f"{where}: frame_index is not 0..{row['length'] - 1}")
        if "episode_index" in frames.dtype.names and np.any(
            frames["episode_index"] != row["episode_index"]
        ):
            raise DatasetError(f"{where}: frames carry another episode_index")
        if "index" in frames.dtype.names:
            index = frames["index"]
            if np.any(np.diff(index) != 1) or (
                previous_index is not None and index[0] <= previous_index
            ):
                raise DatasetError(f"{where}: index is not sorted")
            previous_index = index[-1]


def _check_segments(root: Path, info: fmt.DatasetInfo, table, records) -> int:
    """Every GOP record holds the frames its segment table implies, and decodes."""
    count = 0
    for row in table.to_pylist():
        where = f"{root / fmt.shard_path(row['shard'])}: episode {row['episode_index']}"
        for cam, camera in info.cameras.items():
            starts = row[fmt.segment_column(cam, "segment_starts")]
            first = row[fmt.segment_column(cam, "record_start")]
            bounds = [*starts, row["length"]]
            init = records[row["shard"]][first]
            for k in range(len(starts)):
                segment = records[row["shard"]][fmt.segment_record(first, k)]
                expected = bounds[k + 1] - bounds[k]
                try:
                    n = gop_num_frames(segment)
                    decode_gops(
                        init, [segment], [[n - 1]], camera.codec, camera.width, camera.height
                    )
                except Exception as e:  # torchcodec/PyAV raise RuntimeError or their own errors
                    raise DatasetError(
                        f"{where}, camera {cam}, segment {k}: does not decode ({e})"
                    ) from e
                if n != expected:
                    raise DatasetError(
                        f"{where}, camera {cam}, segment {k}: holds {n} frames, expected {expected}"
                    )
                count += 1
    return count
