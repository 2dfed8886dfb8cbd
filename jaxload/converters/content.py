"""The content a conversion's records are keyed by, worked out before they are assembled.

Every record of the output is sealed with a checksum keyed by the content
(`jaxload.format.sealing`): the fingerprint (the schema, the episodes and the digest of
every record's payload) and the digests of the metadata that says what each record holds.
All of it follows from the finished units' records (each episode's payload digest, lengths,
tasks, GOP tables, vocabularies), so it is known before the first shard is written; the
assembly then checks each part's records against the digest its unit recorded.

    content = job_content(state, units, seed, fps, features, cameras, tasks)
    assemble(..., records_key=content.key)
    DatasetInfo(..., fingerprint=content.fingerprint, metadata_xxh3=content.metadata)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload import format as fmt
from jaxload.converters.partial import JobState
from jaxload.converters.plan import Unit
from jaxload.format import Camera, Feature, sealing


@dataclasses.dataclass(frozen=True)
class Content:
    fingerprint: str  # meta/info.json's fingerprint
    metadata: dict[str, Any]  # records.metadata_xxh3
    key: int  # what every record checksum is keyed by (sealing.records_key)
    frames: int
    episodes: int


def job_content(
    state: JobState,
    units: Sequence[Unit],
    seed: int,
    fps: int,
    features: Mapping[str, Feature],
    cameras: Mapping[str, Camera],
    tasks: Mapping[int, str],
) -> Content:
    """The content of the finished units, in plan order (episodes are read from the unit
    records on disk, a few times over: memory stays bounded by one unit); `tasks`: the
    task_index -> task table meta/tasks.parquet will hold."""
    strings = [k for k, f in features.items() if f.is_string]
    gop_columns = [fmt.segment_column(c, "segment_starts") for c in sorted(cameras)]
    table = sealing.TableDigests(gop_columns, [fmt.strings_column(k) for k in strings])
    payloads, frames, count = [], 0, 0
    for episode in _episodes(state, units):
        table.add(_row(episode, cameras, strings))
        payloads.append(bytes.fromhex(episode["payload_sha256"]))
        frames, count = frames + int(episode["length"]), count + 1
    fingerprint = fmt.content_fingerprint(
        fps,
        features,
        cameras,
        ((e["episode_index"], e["length"], e["tasks"]) for e in _episodes(state, units)),
        sealing.records_digest(payloads),
        {k: (e.get("strings", {}).get(k, []) for e in _episodes(state, units)) for k in strings},
    )
    metadata = sealing.info_digests(
        fps,
        {k: f.to_json() for k, f in features.items()},
        {k: c.to_json() for k, c in cameras.items()},
    ) | {sealing.EPISODES: table.digests()}
    order = sorted(tasks)
    metadata[sealing.TASKS] = sealing.tasks_digest(
        np.array(order, np.int64), [tasks[i] for i in order]
    )
    key = sealing.records_key(seed, fingerprint, metadata)
    return Content(fingerprint, metadata, key, frames, count)


def _episodes(state: JobState, units: Sequence[Unit]) -> Iterator[dict[str, Any]]:
    for unit in units:
        yield from state.unit_episodes(unit.index)


def _row(episode: dict[str, Any], cameras: Mapping[str, Camera], strings: Sequence[str]):
    """The meta/episodes.parquet columns of an episode that the digests cover."""
    row = {"episode_index": episode["episode_index"], "length": episode["length"]}
    row["tasks"] = list(episode["tasks"])
    for cam in cameras:
        starts = episode["videos"][cam]["segment_starts"]
        row[fmt.segment_column(cam, "segment_starts")] = starts
    for key in strings:
        row[fmt.strings_column(key)] = episode.get("strings", {}).get(key, [])
    return row
