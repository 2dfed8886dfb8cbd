"""The partial directory of a conversion: everything a crashed run leaves to resume from.

It sits beside OUT as `.OUT.partial/` (hidden, never a dataset), so a rerun of the same
command finds it:

    lock                     flock'd by the running converter (converters/lock.py)
    plan.json                source identity, options and units: a rerun resumes only
                             when it plans the same
    units/unit-NNNNN.json    one per finished unit: its episodes' metadata
    parts/unit-NNNNN.array_record   that unit's records
    assembly/shard-NNNNN.json       one per finished output shard (assembly checkpoints)
    dataset/                 the output being assembled; renamed to OUT when complete
    published.json           written just before that rename (fingerprint)
    tmp/                     part files being written by workers
    cache/                   downloaded source files (remote sources)

Every record is written durably and atomically: a unique temp name, fsync, `os.replace`,
fsync of the directory. A unit counts as done only once its part is in place and then
its record, so a SIGKILL between any two steps leaves either a finished unit or none.

Example::

    state = JobState.open(partial_dir(out), plan_document, restart=False)
    state.done_units()        # {unit index: what is kept in memory of it (unit_summary)}
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from jaxload.converters.units import UnitResult
from jaxload.errors import JaxloadError

PLAN = "plan.json"
PUBLISHED = "published.json"
# Test hook: "POINT:N" makes this process SIGKILL itself the N-th time it passes POINT
# (see crash_point), so tests can crash a real conversion between any two durable steps.
KILL_AT_ENV = "JAXLOAD_TEST_KILL_AT"
_passed: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Marks a step boundary of the conversion's durable state (a no-op unless the
    JAXLOAD_TEST_KILL_AT test hook names it)."""
    spec = os.environ.get(KILL_AT_ENV)
    if not spec:
        return
    point, _, count = spec.partition(":")
    if point != name:
        return
    _passed[name] = _passed.get(name, 0) + 1
    if _passed[name] == int(count or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def partial_dir(out: Path) -> Path:
    """`.OUT.partial` beside OUT: deterministic, so a rerun finds it."""
    out = Path(out)
    return out.parent / f".{out.name}.partial"


class PlanMismatch(JaxloadError):
    """The partial directory belongs to a conversion with another source or options."""


class JobState:
    """Reads and writes one conversion's partial directory (the caller holds its lock)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.units_dir = self.root / "units"
        self.parts_dir = self.root / "parts"
        self.assembly_dir = self.root / "assembly"
        self.dataset_dir = self.root / "dataset"
        self.tmp_dir = self.root / "tmp"
        self.cache_dir = self.root / "cache"

    @classmethod
    def open(cls, root: Path, plan: dict[str, Any], *, restart: bool = False) -> JobState:
        """The job's state: resumed when its plan matches, new otherwise (see `restart`).

        A partial directory from a conversion with another plan is refused, unless
        `restart`, which discards it.
        """
        state = cls(root)
        stored = state.plan()
        if stored is not None and stored != plan and not restart:
            done = len(state.done_units())
            raise PlanMismatch(
                f"{root}: holds an interrupted conversion with another source, options "
                f"or episodes ({done} finished units); rerun it with its original "
                "arguments to finish it, or add --restart to discard it"
            )
        if stored is None or stored != plan:
            # Downloads stay when they are of the same source (this run's metadata is there).
            same_source = stored is None or stored.get("source") == plan.get("source")
            state._clear(keep_cache=same_source)
            write_json_durable(state.root / PLAN, plan)
        for directory in (state.units_dir, state.parts_dir, state.assembly_dir, state.tmp_dir):
            directory.mkdir(parents=True, exist_ok=True)
        _clear_dir(state.tmp_dir)  # parts of units that were in flight when a run died
        return state

    def plan(self) -> dict[str, Any] | None:
        return read_json(self.root / PLAN)

    # --- units --------------------------------------------------------------------------

    def unit_record_path(self, unit: int) -> Path:
        return self.units_dir / f"unit-{unit:05d}.json"

    def part_path(self, unit: int) -> Path:
        return self.parts_dir / f"unit-{unit:05d}.array_record"

    def done_units(self) -> dict[int, dict[str, Any]]:
        """Finished units whose part is still there (a part is deleted once assembled
        into finished shards; its record stays and says so), each as its `unit_summary`:
        what the converter keeps in memory of a unit (its episodes stay on disk)."""
        done = {}
        if not self.units_dir.is_dir():
            return done
        for path in sorted(self.units_dir.glob("unit-*.json")):
            record = read_json(path)
            if record is None:
                continue
            part = self.part_path(record["unit"])
            if record.get("assembled") or (
                part.is_file() and part.stat().st_size == record.get("part_size")
            ):
                done[record["unit"]] = unit_summary(record)
        return done

    def unit_episodes(self, unit: int) -> list[dict[str, Any]]:
        """The per-episode records of a finished unit (read from its record)."""
        record = read_json(self.unit_record_path(unit))
        if record is None:
            raise JaxloadError(f"{self.unit_record_path(unit)}: missing or unreadable")
        return record["episodes"]

    def record_unit(self, result: UnitResult) -> dict[str, Any]:
        """Moves the unit's part into place, then records the unit as done (in that order);
        returns its `unit_summary`."""
        final = self.part_path(result.unit)
        if result.part_bytes is not None:
            tmp = self.tmp_dir / f"{final.name}.{uuid.uuid4().hex[:12]}.tmp"
            tmp.write_bytes(result.part_bytes)
        else:
            tmp = Path(result.part_path)
        fsync_path(tmp)
        os.replace(tmp, final)
        fsync_path(final.parent)
        crash_point("unit-part")
        record = result.record() | {"part_size": final.stat().st_size}
        write_json_durable(self.unit_record_path(result.unit), record)
        crash_point("unit-record")
        return unit_summary(record)

    def mark_assembled(self, unit: int) -> None:
        """Its records are in finished shards: the part can go, the record stays."""
        record = read_json(self.unit_record_path(unit))
        if record is not None:
            write_json_durable(self.unit_record_path(unit), record | {"assembled": True})
        self.part_path(unit).unlink(missing_ok=True)

    # --- assembly checkpoints ------------------------------------------------------------

    def shard_checkpoint_path(self, shard: int) -> Path:
        return self.assembly_dir / f"shard-{shard:05d}.json"

    def shard_checkpoints(self) -> list[dict[str, Any]]:
        """Finished shards 0..k-1 in order (stops at the first gap), without their episode
        rows (`checkpoint_rows`)."""
        found = []
        while True:
            record = read_json(self.shard_checkpoint_path(len(found)))
            if record is None:
                return found
            found.append({k: v for k, v in record.items() if k != "rows"})

    def checkpoint_rows(self, shard: int) -> list[dict[str, Any]]:
        """The meta/episodes.parquet rows of the episodes a finished shard holds."""
        record = read_json(self.shard_checkpoint_path(shard))
        if record is None:
            raise JaxloadError(f"{self.shard_checkpoint_path(shard)}: missing or unreadable")
        return record["rows"]

    # --- the end ---------------------------------------------------------------------------

    def mark_published(self, fingerprint: str) -> None:
        write_json_durable(self.root / PUBLISHED, {"fingerprint": fingerprint})

    def published_fingerprint(self) -> str | None:
        record = read_json(self.root / PUBLISHED)
        return None if record is None else record.get("fingerprint")

    def has_work(self) -> bool:
        """Whether anything here is worth keeping for a rerun."""
        return bool(self.done_units())

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _clear(self, *, keep_cache: bool) -> None:
        """Everything but the lock (which the caller holds) and perhaps the cache."""
        if not self.root.is_dir():
            return
        for entry in self.root.iterdir():
            if entry.name == "lock" or (keep_cache and entry == self.cache_dir):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def unit_summary(record: dict[str, Any]) -> dict[str, Any]:
    """What the converter keeps in memory of a finished unit: whether it is assembled, and
    per camera the fidelity of its episodes (worst frame, and each episode's PSNR sum and
    frame count, for an exactly rounded mean over the dataset), and the stamps of the
    source files it read (converters/source_stamps.py); its episodes stay on disk."""
    lows: dict[str, float] = {}
    sums: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for episode in record["episodes"]:
        for cam, stream in episode["videos"].items():
            lows[cam] = min(lows.get(cam, math.inf), float(stream["psnr_min"]))
            sums.setdefault(cam, []).append(float(stream["psnr_sum"]))
            counts[cam] = counts.get(cam, 0) + stream["psnr_count"]
    return {
        "unit": record["unit"],
        "assembled": bool(record.get("assembled")),
        "psnr": {cam: (lows[cam], np.array(sums[cam]), counts[cam]) for cam in lows},
        "sources": record.get("sources"),
    }


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object, or None when the file is missing or torn (treated as never written)."""
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_json_durable(path: Path, obj: Any) -> None:
    """Atomic and durable: a unique temp name, fsync, os.replace, fsync of the directory."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_path(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _clear_dir(directory: Path) -> None:
    if directory.is_dir():
        for entry in directory.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
