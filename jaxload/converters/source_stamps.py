"""A resumed conversion converts again every finished unit whose source files changed.

The plan (converters/plan.py) identifies the source by its location and the bytes of its
metadata; the data parquet and video files a unit reads are identified per unit instead:
its record (units/unit-NNNNN.json) keeps each such file's stamp (`Files.stamp`: size,
mtime and ctime for a local file, the listed version of a remote one), taken before the
unit ran. Before a rerun, `forget_changed` drops the finished units whose files no longer
match (a data parquet fixed in place, a video re-encoded), with what was assembled from
the first of them on, so they are converted again and the output holds the new values.

    units = forget_changed(state, source, job.units)  # before reconcile() and the run
    record |= {"sources": unit_sources(source, unit)}  # stamped when the unit is dispatched
    changed_sources(state, source, job.units)  # after the run: files replaced meanwhile

The same comparison after every unit of a run has finished catches a file replaced while
the run went on (units before the change read the old version, units after it the new):
`jaxload convert` converts the units that read it again (a few rounds, then fails), so the
output never mixes two versions of a file.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from jaxload import format as fmt
from jaxload.converters.lerobot_common import LeRobotSource
from jaxload.converters.partial import JobState
from jaxload.converters.plan import Unit
from jaxload.errors import JaxloadError

# Rounds of converting again the units whose source files changed during a run, before the
# run fails (a source being written all the time).
CHANGED_RERUNS = 2
# The files of shard k in the dataset being assembled: shard-k.array_record, shard-k.offsets.
_SHARD_FILE = re.compile(r"shard-(\d+)\.")


def unit_sources(source: LeRobotSource, unit: Unit) -> dict[str, dict[str, Any]]:
    """Each source file the unit's episodes read (by path in the source) with its stamp."""
    rels = sorted({rel for episode in unit.episodes for rel in source.episode_files(episode)})
    return {rel: source.files.stamp(rel) for rel in rels}


def changed_sources(state: JobState, source: LeRobotSource, units: Sequence[Unit]) -> list[str]:
    """The source files (paths in the source) whose stamp now differs from the one a
    finished unit recorded before reading them: a file replaced or rewritten while (or
    since) that unit ran. Checked after every unit has run, it proves each unit read the
    version that is there now, so the output mixes no two versions of a file."""
    done, changed = state.done_units(), set()
    for unit in units:
        record = done.get(unit.index)
        if record is None:
            continue
        recorded = record.get("sources") or {}
        now = unit_sources(source, unit)
        changed |= {
            rel for rel in now.keys() | recorded.keys() if recorded.get(rel) != now.get(rel)
        }
    return sorted(changed)


def in_one_version(
    run_pending: Callable[[], tuple[dict[int, dict[str, Any]], Any]],
    state: JobState,
    source: LeRobotSource,
    units: Sequence[Unit],
    progress: bool,
) -> tuple[dict[int, dict[str, Any]], Any]:
    """Runs the pending units (`run_pending()` -> (done units, stats)) until no finished
    unit read a source file that changed since it was stamped: the units that read one are
    converted again (CHANGED_RERUNS more rounds), then the run fails naming the file."""
    for again in range(CHANGED_RERUNS + 1):
        done, stats = run_pending()
        changed = changed_sources(state, source, units)
        if not changed:
            return done, stats
        named = ", ".join(changed[:3])
        if again == CHANGED_RERUNS:
            raise JaxloadError(
                f"{source.root}: {named} changed while it was being converted, "
                f"{CHANGED_RERUNS + 1} times in a row; convert a source nobody is writing (the "
                "units that read it are converted again on the next run)"
            )
        if progress:
            print(f"{named} changed while converting: converting the units that read it "
                  "again", file=sys.stderr, flush=True)  # fmt: skip
        forget_changed(state, source, units)
    raise AssertionError("unreachable")


def forget_changed(state: JobState, source: LeRobotSource, units: Sequence[Unit]) -> list[int]:
    """Forgets the finished units whose source files changed since they ran (or whose
    record has no stamps, from an older converter): their records and parts, and every
    assembled shard from the first one holding one of their episodes. Returns them."""
    done = state.done_units()
    changed, first = [], None
    start = 0  # plan position of the unit's first episode
    for unit in units:
        record = done.get(unit.index)
        if record is not None and record.get("sources") != unit_sources(source, unit):
            changed.append(unit.index)
            first = start if first is None else first
        start += len(unit.episodes)
    if not changed:
        return []
    for index in changed:
        state.unit_record_path(index).unlink(missing_ok=True)
        state.part_path(index).unlink(missing_ok=True)
    # Shards hold episodes in plan order: those before the first changed unit stay.
    checkpoints = state.shard_checkpoints()
    keep = sum(1 for c in checkpoints if c["stop"] <= first)
    for checkpoint in checkpoints[keep:]:
        state.shard_checkpoint_path(checkpoint["shard"]).unlink(missing_ok=True)
    data = state.dataset_dir / fmt.shard_path(0)
    if data.parent.is_dir():
        for path in data.parent.iterdir():
            match = _SHARD_FILE.match(path.name)
            if match and int(match.group(1)) >= keep:
                path.unlink(missing_ok=True)
    return changed
