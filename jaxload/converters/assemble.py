"""Assembling finished units into the output dataset: shards, then metadata.

Parts are read in unit order and their episodes appended to shards by `ShardWriter`
(a new shard past shard_bytes, an episode never split), so shard boundaries and bytes
depend only on the episodes, not on how the units were run. Each finished shard is
checkpointed (`assembly/shard-NNNNN.json`: the episodes it ends before and their rows)
and the parts it used up are deleted, so the partial directory holds about one copy of
the output, and a run killed during assembly resumes at the next shard.

Records are sealed with the key of the content (`converters/content.py`), worked out from
the units' records before assembly; each episode's records are checked against the digest
its unit recorded as they are copied, so a part damaged on disk is converted again instead
of being sealed as valid.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from jaxload import format as fmt
from jaxload.converters.partial import JobState, crash_point, write_json_durable
from jaxload.converters.plan import Unit
from jaxload.converters.writer import ShardWriter
from jaxload.errors import JaxloadError
from jaxload.format import sealing
from jaxload.format.shards import open_shard

# meta/episodes.parquet is written this many episodes per row group (memory stays bounded).
ROW_GROUP_EPISODES = 4096


@dataclasses.dataclass
class Assembled:
    state: JobState  # its shard checkpoints hold the meta/episodes.parquet rows
    num_shards: int
    shard_records: tuple[int, ...] = ()  # records per shard

    def rows(self) -> Iterator[dict[str, Any]]:
        """meta/episodes.parquet's rows in episode order, read shard by shard."""
        for shard in range(self.num_shards):
            yield from self.state.checkpoint_rows(shard)


def reconcile(state: JobState, units: Sequence[Unit]) -> None:
    """Before a (re)run: drops assembly checkpoints whose shard is gone, and forgets
    assembled units that those shards held (their parts are gone: they run again)."""
    checkpoints = state.shard_checkpoints()
    valid = 0
    for checkpoint in checkpoints:
        path = state.dataset_dir / fmt.shard_path(checkpoint["shard"])
        if not (path.is_file() and path.stat().st_size == checkpoint["size"]):
            break
        valid += 1
    for checkpoint in checkpoints[valid:]:
        state.shard_checkpoint_path(checkpoint["shard"]).unlink(missing_ok=True)
    covered = checkpoints[valid - 1]["stop"] if valid else 0
    done = state.done_units()
    for unit, stop in zip(units, _unit_stops(units)):
        record = done.get(unit.index)
        if record is not None and record.get("assembled") and stop > covered:
            state.unit_record_path(unit.index).unlink(missing_ok=True)


def assemble(
    state: JobState,
    units: Sequence[Unit],
    records: dict[int, dict[str, Any]],
    cameras: Sequence[str],
    shard_bytes: int,
    records_key: int,
) -> Assembled:
    """Writes every shard (resuming after the last checkpoint) into state.dataset_dir,
    each record sealed with `records_key` (`converters/content.py`)."""
    checkpoints = state.shard_checkpoints()
    for checkpoint in checkpoints:
        if checkpoint.get("records_key") != records_key:
            raise JaxloadError(
                f"{state.shard_checkpoint_path(checkpoint['shard'])}: the shards assembled "
                "before were sealed for other content than the finished units hold now (a "
                "unit converted again gave other records); rerun with --restart"
            )
    resume_at = checkpoints[-1]["stop"] if checkpoints else 0
    stops = _unit_stops(units)
    shard_rows: list[dict[str, Any]] = []
    appended = resume_at  # episodes (in plan order) appended so far
    next_unit = 0  # first unit whose part may still be needed

    def on_close(shard: int, count: int, size: int) -> None:
        nonlocal next_unit
        crash_point("shard-file")
        checkpoint = {
            "shard": shard,
            "stop": appended,
            "records": count,
            "size": size,
            "records_key": records_key,
            "rows": list(shard_rows),
        }
        write_json_durable(state.shard_checkpoint_path(shard), checkpoint)
        shard_rows.clear()
        while next_unit < len(units) and stops[next_unit] <= appended:
            index = units[next_unit].index
            if not records[index].get("assembled"):
                state.mark_assembled(index)
                records[index] = records[index] | {"assembled": True}
            next_unit += 1
        crash_point("shard-checkpoint")

    writer = ShardWriter(
        state.dataset_dir,
        shard_bytes,
        first_shard=len(checkpoints),
        on_close=on_close,
        record_seed=records_key,
    )
    try:
        for unit, stop in zip(units, stops):
            if stop <= resume_at:
                continue
            first = stop - len(unit.episodes)
            for position, (episode, blocks) in enumerate(
                _part_episodes(state, unit.index, cameras), start=first
            ):
                if position < resume_at:
                    continue
                _check_payloads(state, unit.index, episode, blocks)
                shard, starts = writer.append_episode(blocks)
                shard_rows.append(_row(episode, shard, starts, cameras))
                appended = position + 1
        writer.close()
    except BaseException:
        writer.abort()
        raise
    counts = tuple(c["records"] for c in state.shard_checkpoints())
    return Assembled(state, writer.num_shards, counts)


def write_episodes(
    path: Path, rows: Iterable[dict[str, Any]], cameras: Sequence[str], strings: Sequence[str]
) -> None:
    """meta/episodes.parquet at `path`, ROW_GROUP_EPISODES rows at a time."""
    schema = fmt.episodes_table([], cameras, strings).schema
    rows = iter(rows)
    with pq.ParquetWriter(path, schema) as writer:
        while group := list(itertools.islice(rows, ROW_GROUP_EPISODES)):
            writer.write_table(fmt.episodes_table(group, cameras, strings))


def _unit_stops(units: Sequence[Unit]) -> list[int]:
    """For each unit, the plan position just past its last episode."""
    stops, total = [], 0
    for unit in units:
        total += len(unit.episodes)
        stops.append(total)
    return stops


def _part_episodes(state: JobState, unit: int, cameras: Sequence[str]):
    """(episode record, record blocks) of each episode in a unit's part, in order.

    A part that cannot be read (a damaged disk) is forgotten with its record, so the
    rerun the error asks for converts that unit again.
    """
    episodes = state.unit_episodes(unit)
    path = state.part_path(unit)
    try:
        reader = open_shard(path)
    except JaxloadError as e:  # missing or corrupt: open_shard names the file
        raise _bad_part(state, unit, e) from e
    try:
        start = 0
        for episode in episodes:
            counts = [episode["frame_records"]]
            counts += [
                fmt.camera_record_count(len(episode["videos"][cam]["segment_starts"]))
                for cam in cameras
            ]
            try:
                data = reader.read(list(range(start, start + sum(counts))))
            except Exception as e:
                raise _bad_part(state, unit, e) from e
            start += sum(counts)
            blocks, offset = [], 0
            for n in counts:
                blocks.append(data[offset : offset + n])
                offset += n
            yield episode, blocks
    finally:
        reader.close()


def _check_payloads(state: JobState, unit: int, episode: dict[str, Any], blocks) -> None:
    """The episode's records as its unit recorded them (`sealing.episode_digest`)."""
    digest = sealing.episode_digest(record for block in blocks for record in block)
    if digest.hex() != episode["payload_sha256"]:
        raise _bad_part(
            state,
            unit,
            f"episode {episode['episode_index']}'s records differ from the digest its unit "
            "recorded",
        )


def _bad_part(state: JobState, unit: int, error: Exception | str) -> JaxloadError:
    state.unit_record_path(unit).unlink(missing_ok=True)
    state.part_path(unit).unlink(missing_ok=True)
    return JaxloadError(
        f"{state.part_path(unit)}: unreadable ({error}); it was dropped, rerun the command "
        "to convert that unit again"
    )


def _row(episode: dict[str, Any], shard: int, starts: list[int], cameras: Sequence[str]):
    row = {
        "episode_index": episode["episode_index"],
        "length": episode["length"],
        "dataset_from_index": episode["dataset_from_index"],
        "tasks": list(episode["tasks"]),
        "shard": shard,
        "frames_record_start": starts[0],
    }
    for key, vocabulary in episode.get("strings", {}).items():
        row[fmt.strings_column(key)] = list(vocabulary)
    for cam, start in zip(cameras, starts[1:]):
        stream = episode["videos"][cam]
        row[fmt.segment_column(cam, "record_start")] = start
        row[fmt.segment_column(cam, "segment_starts")] = stream["segment_starts"]
        row[fmt.segment_column(cam, "psnr_min")] = float(stream["psnr_min"])
    return row


def fidelity(records: dict[int, dict[str, Any]], cameras: Sequence[str]):
    """camera -> (min, mean) PSNR over every frame of every episode (dB, inf = lossless),
    from the units' summaries (`jaxload.converters.partial.unit_summary`)."""
    out = {}
    for cam in cameras:
        parts = [record["psnr"][cam] for _, record in sorted(records.items())]
        count = sum(c for _, _, c in parts)
        total = math.fsum(np.concatenate([sums for _, sums, _ in parts]).tolist())
        out[cam] = (min(lo for lo, _, _ in parts), total / max(count, 1))
    return out
