"""`jaxload convert`: a LeRobot dataset in, a jaxload dataset out, at any scale, crash-safe.

1. SRC is resolved (local directory, fsspec URL or hub id: converters/sources.py) and its
   metadata read (LeRobot v3.0 or v2.1); only metadata is fetched up front.
2. The selected episodes are cut into work units from their cost (converters/plan.py),
   independently of the engine and worker count.
3. The partial directory `.OUT.partial/` beside OUT is locked (one converter per OUT) and
   its state resumed when it holds an interrupted run of the same plan
   (converters/partial.py).
4. Pending units run on the engine, costliest first (converters/engines.py); each
   finished unit's part and record are written atomically as it completes.
5. Parts are assembled into shards in episode order, metadata written
   (converters/assemble.py), and the finished dataset renamed to OUT in one step.
6. An OUT that is a URL (s3://, gs://, hf://) is converted as above into a local staging
   directory, then uploaded with meta/info.json last (converters/publish.py).

So OUT never exists half-written, the output bytes depend only on the source, the
options and the episode selection, and rerunning the same command after a crash (SIGKILL
at any point) finishes the job without redoing finished units.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxload import format as fmt
from jaxload.converters import video
from jaxload.converters.assemble import Assembled, assemble, fidelity, reconcile, write_episodes
from jaxload.converters.content import Content, job_content
from jaxload.converters.engines import Engine, make_engine
from jaxload.converters.fidelity import choose_crfs
from jaxload.converters.hub import HubClient, HubFiles
from jaxload.converters.lerobot_common import LeRobotSource
from jaxload.converters.lock import JobLock
from jaxload.converters.options import (
    DEFAULT_CRF,
    DEFAULT_GOP,
    DEFAULT_TUNE,
    check_episodes,
    check_numbers,
    encode_options,
    parse_episodes,
    resize_record,
)
from jaxload.converters.partial import JobState, PlanMismatch, crash_point, partial_dir
from jaxload.converters.plan import (
    Unit,
    balance,
    dispatch_order,
    plan_document,
    plan_id,
    plan_units,
)
from jaxload.converters.progress import ConvertReport, ProgressBar
from jaxload.converters.publish import finish_output, resolve_out
from jaxload.converters.sizes import conversion_sizes, source_file_bytes, tree_bytes
from jaxload.converters.source_stamps import forget_changed, in_one_version, unit_sources
from jaxload.converters.sources import open_files, open_source
from jaxload.converters.storage import check_out, storage_errors
from jaxload.converters.tabular import features_from_schema
from jaxload.converters.units import UnitContext, UnitResult
from jaxload.converters.writer import DEFAULT_SHARD_BYTES, write_offsets
from jaxload.errors import JaxloadError
from jaxload.format import Camera, DatasetInfo, Feature
from jaxload.stats import write_stats
from jaxload.storage.retry import RetryPolicy

__all__ = [
    "DEFAULT_CRF",
    "DEFAULT_GOP",
    "DEFAULT_TUNE",
    "ConvertReport",
    "convert",
    "parse_episodes",
]


def convert(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    video_codec: str | None = None,
    gop: int | None = None,
    crf: int | None = None,
    tune: str | None = None,
    min_psnr: float | None = None,
    workers: int | None = None,
    engine: str = "local",
    episodes: Sequence[int] | str | None = None,
    repo_id: str | None = None,
    revision: str | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    progress: bool = True,
    cache_dir: str | os.PathLike | None = None,
    retry: RetryPolicy | None = None,
    restart: bool = False,
    ray_address: str | None = None,
    hub_client: HubClient | None = None,
    filesystem: Any = None,
    work_dir: str | os.PathLike | None = None,
    keep_local: bool = False,
    storage_options: dict[str, Any] | None = None,
    resize: str | tuple[int, int] | None = None,
    max_size: int | None = None,
) -> ConvertReport:
    """Converts the LeRobot dataset at `src` (v3.0 or v2.1; a directory, an fsspec URL
    or a hub id) into a jaxload dataset at `out`.

    `video_codec`: None (the default, "auto": every video camera whose codec the readers
    decode, H.264, HEVC or AV1, keeps the source's bitstream, so its frames are exactly
    LeRobotDataset's; other video cameras are re-encoded to h264; `image` cameras are
    stored lossless), "copy" (the same, but a camera that cannot be copied is an error),
    or a re-encode: "h264", "hevc", "lossless" (exact pixels: x264 RGB at qp 0). A re-encode
    option (`gop`, `crf`, `tune`, `min_psnr`, `resize`, `max_size`) without `video_codec`
    means "h264". `gop`: frames per GOP of a re-encode (default DEFAULT_GOP).
    `crf`: x264/x265 crf (default DEFAULT_CRF for video cameras; `image` cameras default
    to a DEFAULT_IMAGE_MIN_PSNR dB target). `min_psnr`: instead of `crf`, the fidelity
    (dB) every stored frame must reach: the largest crf meeting it on a sample of each
    camera's frames is chosen (and an episode that misses it is re-encoded lower).
    `workers`: processes of the local pool (default: every core), or the CPUs of a local
    Ray instance. `engine`: "local" or "ray". `cache_dir`: where remote files are
    downloaded (default: inside the partial directory, deleted as soon as no unit needs
    them). `restart`: discard an interrupted conversion into `out` with other arguments.
    `hub_client` / `filesystem` replace huggingface_hub / the URL's fsspec filesystem.
    `resize` ("HxW" or (height, width)) stores every camera at that size; `max_size` bounds
    the longer side instead, keeping the aspect ratio (never enlarging): swscale's area
    average, bit-exact, before encoding; fidelity is measured against the resized source and
    info.json records the flag and each camera's source size.

    `out` may be a URL (s3://, gs://, hf://): the dataset is converted into a local staging
    directory under `work_dir` (default ~/.cache/jaxload/convert), then uploaded with
    meta/info.json last, using `storage_options` (fsspec's; default: its environment and
    configuration); the staging copy is removed after the upload unless `keep_local`. A
    destination holding any object is refused (converters/publish.py).

    Example:
        >>> report = convert("data/demo", "out/demo_copy", workers=1, progress=False)
        >>> report.episodes, jaxload.open("out/demo_copy").fps
        (4, 10)

    A full disk or an unwritable OUT raises a JaxloadError saying what a rerun does.
    """
    target, out = resolve_out(out, work_dir, keep_local, storage_options, retry)
    check_out(out)
    with storage_errors(str(out)):
        started = time.perf_counter()
        options = encode_options(video_codec, gop, crf, tune, min_psnr, resize, max_size)
        check_numbers(workers, shard_bytes)
        if engine not in ("local", "ray"):
            raise JaxloadError(f"--engine {engine!r}: choose local or ray")
        partial = partial_dir(out)
        if _nonempty(out) and not partial.exists():
            raise JaxloadError(f"{out}: already exists and is not empty; refusing to overwrite it")
        created = not partial.exists()
        lock = JobLock(partial, what=target.url if target is not None else str(out))
        lock.acquire()
        state: JobState | None = None
        try:
            if target is not None:
                target.refuse_unless_ours(partial)  # before reading anything of the source
            files = open_files(
                src,
                revision=revision,
                cache_dir=cache_dir if cache_dir is not None else partial / "cache",
                policy=retry,
                hub_client=hub_client,
                filesystem=filesystem,
            )
            source = open_source(files)
            job = _Job.plan(source, episodes, options, shard_bytes, _repo_id(files, repo_id))
            state = JobState.open(partial, job.document, restart=restart)
            finish = functools.partial(finish_output, target, state, out, keep_local, progress)
            if target is not None:
                target.refuse_unless_ours(partial)  # --restart may have discarded our record
                report = target.finished(state, out, started, keep_local=keep_local)
                if report is not None:  # the upload completed; a run died cleaning up
                    state.remove()
                    return report
            if _nonempty(out):
                return finish(_already_published(state, out, started))
            forget_changed(state, source, job.units)  # their source files changed since
            reconcile(state, job.units)

            def run_pending() -> tuple[dict[int, dict[str, Any]], _RunStats]:
                done = state.done_units()
                with make_engine(engine, workers, ray_address=ray_address) as runner:
                    owns_cache = cache_dir is None
                    return done, _run_units(
                        job, state, done, runner, progress, owns_cache=owns_cache
                    )

            # A source file replaced while the units ran: those that read it run again.
            done, stats = in_one_version(run_pending, state, source, job.units, progress)
            cameras = {cam: _camera(source, job.options, cam) for cam in source.camera_keys}
            content = job_content(
                state, job.units, job.record_seed, source.fps, job.features, cameras, source.tasks
            )
            assembled = assemble(
                state, job.units, done, source.camera_keys, shard_bytes, content.key
            )
            info = _dataset_info(job, assembled, done, cameras, content)
            offsets = write_offsets(state.dataset_dir, assembled.shard_records)
            info = dataclasses.replace(info, offsets_xxh3=offsets)
            _write_meta(state.dataset_dir, source, assembled.rows(), info)
            crash_point("meta")
            state.mark_published(info.fingerprint)
            crash_point("published")
            _publish(state.dataset_dir, out)
            crash_point("renamed")
            return finish(_report(job, out, started, done, stats))
        except BaseException as e:
            if (state is None and created) or (state is not None and not state.has_work()):
                shutil.rmtree(partial, ignore_errors=True)
            elif isinstance(e, JaxloadError) and not isinstance(e, PlanMismatch) and e.args:
                e.args = (
                    f"{e.args[0]}\n(the finished work is kept in {partial}: rerun the same command "
                    "to resume, or delete that directory)",
                    *e.args[1:],
                )
            raise
        finally:
            lock.release()


# --- planning ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Job:
    """A planned conversion: the source, what to convert and how, and the units."""

    source: LeRobotSource
    selected: list[int]
    features: dict[str, Feature]
    options: video.EncodeOptions
    shard_bytes: int
    repo_id: str | None
    units: list[Unit]
    document: dict[str, Any]
    record_seed: int  # records.seed: the settings part of the record key (converters/content.py)

    @classmethod
    def plan(cls, source, episodes, options, shard_bytes, repo_id) -> _Job:
        selected = _select_episodes(source, episodes)
        features = _features(source, selected[0])
        options = dataclasses.replace(options, camera_crf=choose_crfs(source, selected, options))
        pixels = sum(h * w for h, w in map(source.camera_size, source.camera_keys))
        shares = source.input_bytes(selected)
        units = plan_units(
            selected,
            [source.episode(ep).length for ep in selected],
            pixels,
            [shares[ep] for ep in selected],
        )
        identity = source.files.identity() | {
            "codebase_version": source.codebase_version,
            "meta_sha256": source.meta_digest(),
        }
        settings = {
            "format_version": fmt.FORMAT_VERSION,
            "frames_per_block": fmt.FRAMES_PER_BLOCK,
            "video": options.settings(),  # as stored: tuples -> lists
            "shard_bytes": shard_bytes,
            "repo_id": repo_id,
        }
        document = plan_document(identity, settings, units)
        seed = _record_seed(source, selected, features, settings)
        return cls(source, selected, features, options, shard_bytes, repo_id, units, document, seed)

    @property
    def id(self) -> str:
        return plan_id(self.document)

    @property
    def frames(self) -> int:
        return sum(u.frames for u in self.units)


def _record_seed(source, selected, features, settings) -> int:
    """records.seed, the settings part of the record key: from what the dataset holds and
    how it is encoded, never from paths or the source's layout (v2.1 and v3.0 of the same
    data convert to the same bytes). The content part (every record's payload, the
    metadata that places frames) is added by `converters/content.py`."""
    episodes = [[e, source.episode(e).length, list(source.episode(e).tasks)] for e in selected]
    encoding = {k: v for k, v in settings.items() if k != "repo_id"}  # a label, not content
    content = [source.fps, {k: f.to_json() for k, f in features.items()}, episodes, encoding]
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    return int(digest[:16], 16)


def _select_episodes(source: LeRobotSource, episodes: Sequence[int] | str | None) -> list[int]:
    available = source.episode_ids
    if episodes is None:
        return list(available)
    wanted = parse_episodes(episodes) if isinstance(episodes, str) else sorted(set(episodes))
    check_episodes(
        wanted,
        list(available),
        episodes if isinstance(episodes, str) else None,
        where=str(source.root),
    )
    return wanted


def _features(source: LeRobotSource, first_episode: int) -> dict[str, Feature]:
    schema = source.data_schema(first_episode)
    columns = source.tabular_columns(schema.names)
    where = source.files.describe(source.data_file(first_episode))
    return features_from_schema(schema, columns, source.features, where)


def _repo_id(files, repo_id: str | None) -> str | None:
    """--repo-id, or the hub id a hub source was fetched from."""
    return repo_id or (files.repo_id if isinstance(files, HubFiles) else None)


# --- running ------------------------------------------------------------------------------


@dataclasses.dataclass
class _RunStats:
    engine: str
    workers: int
    resumed: int
    retries: int
    balance_lpt: float
    balance_round_robin: float
    worker_seconds: dict[str, float]


def _run_units(
    job: _Job,
    state: JobState,
    done: dict[int, dict[str, Any]],
    runner: Engine,
    progress: bool,
    *,
    owns_cache: bool,
) -> _RunStats:
    """Runs the pending units, recording each as it finishes (into `done`)."""
    # Costliest first keeps parallel workers busy to the end; one worker goes in episode
    # order (same total time, and errors name the first bad episode).
    order = dispatch_order(job.units) if runner.slots > 1 else range(len(job.units))
    pending = [job.units[i] for i in order if i not in done]
    resumed = len(job.units) - len(pending)
    expected = balance([u.cost for u in job.units], runner.slots)
    stats = _RunStats(
        runner.name,
        runner.slots,
        resumed,
        0,
        expected.lpt,
        expected.round_robin,
        {},
    )
    if progress:
        print(_plan_line(job, runner, expected, resumed), file=sys.stderr, flush=True)
    bar = ProgressBar(
        total_frames=job.frames,
        total_episodes=len(job.selected),
        done_frames=sum(job.units[i].frames for i in done),
        done_episodes=sum(len(job.units[i].episodes) for i in done),
        enabled=progress,
    )
    evict = _Evictor(job, pending) if owns_cache and job.source.files.remote else None
    here = f"{socket.gethostname()}:{os.getpid()}"  # as units.convert_unit names workers

    def on_result(result: UnitResult) -> None:
        result.sources = stamps[result.unit]
        done[result.unit] = state.record_unit(result)
        unit = job.units[result.unit]
        bar.unit_done(unit.frames, len(unit.episodes), unit.input_bytes)
        if result.worker != here:  # this process's own retries are counted at the end
            stats.retries += result.retries
        seconds = stats.worker_seconds.get(result.worker, 0.0)
        stats.worker_seconds[result.worker] = seconds + result.seconds
        if evict is not None:
            evict.unit_done(unit)

    context = UnitContext(job.source, job.options, job.features, str(state.tmp_dir), job.id)
    stamps = {u.index: unit_sources(job.source, u) for u in pending}  # before they read
    try:
        if pending:
            runner.run(context, pending, on_result)
    finally:
        bar.close()
    return stats


def _plan_line(job: _Job, runner: Engine, expected, resumed: int) -> str:
    source = job.source
    line = (
        f"convert {source.root} (LeRobot {source.codebase_version}): "
        f"{len(job.selected)} episodes, {job.frames} frames in {len(job.units)} units on "
        f"{runner.slots} {runner.name} worker(s); cost balance max/mean {expected.lpt:.2f} "
        f"(round-robin {expected.round_robin:.2f})"
    )
    if resumed:
        line += f"; resuming: {resumed} of {len(job.units)} units already done"
    return line


class _Evictor:
    """Deletes a downloaded source file once no pending unit needs it (owned caches)."""

    def __init__(self, job: _Job, pending: Sequence[Unit]):
        self.files = job.source.files
        self.needs = {u.index: self._files_of(job.source, u) for u in pending}
        self.count = collections.Counter(f for fs in self.needs.values() for f in fs)

    @staticmethod
    def _files_of(source: LeRobotSource, unit: Unit) -> set[str]:
        return {f for ep in unit.episodes for f in source.episode_files(ep)}

    def unit_done(self, unit: Unit) -> None:
        for rel in self.needs.pop(unit.index, ()):
            self.count[rel] -= 1
            if self.count[rel] == 0:
                self.files.evict(rel)


# --- finishing ------------------------------------------------------------------------------


def _dataset_info(
    job: _Job,
    assembled: Assembled,
    done: dict[int, dict],
    cameras: dict[str, Camera],
    content: Content,
) -> DatasetInfo:
    source, options = job.source, job.options
    described = {
        "format": "lerobot",
        "codebase_version": source.codebase_version,
        "repo_id": job.repo_id,
        "robot_type": source.info.get("robot_type"),
    }
    if isinstance(source.files, HubFiles):
        described["revision"] = source.files.sha
    info = DatasetInfo(
        fps=source.fps,
        total_frames=content.frames,
        total_episodes=content.episodes,
        features=job.features,
        cameras=cameras,
        num_shards=assembled.num_shards,
        fingerprint=content.fingerprint,
        record_seed=job.record_seed,
        metadata_xxh3=content.metadata,
        shard_records=assembled.shard_records,
        source=described,
        converter={
            "frames_per_block": fmt.FRAMES_PER_BLOCK,
            "video_codec": options.codec,
            "gop": options.gop,
            # The crf given or defaulted; a target (min_psnr) picks per-camera crfs instead.
            "crf": None
            if options.codec in ("lossless", "copy", "auto") or options.min_psnr
            else options.crf,
            "tune": options.tune or None,
            "min_psnr": options.min_psnr,
            "image_min_psnr": options.image_min_psnr,
            "camera_crf": dict(options.camera_crf),
            **resize_record(options, {cam: source.camera_size(cam) for cam in source.camera_keys}),
            "shard_bytes": job.shard_bytes,
            "fidelity_psnr_db": {
                cam: {"min": _finite(lo), "mean": _finite(mean)}
                for cam, (lo, mean) in fidelity(done, source.camera_keys).items()
            },
        },
    )
    # info.json as a reader will see it must check out and derive the key just used.
    again = DatasetInfo.from_json(json.loads(json.dumps(info.to_json())), fmt.INFO_PATH)
    if again.records_key != content.key:
        raise AssertionError("info.json does not derive the key its records were sealed with")
    return info


def _camera(source: LeRobotSource, options: video.EncodeOptions, cam: str) -> Camera:
    """A camera's meta/info.json entry: how its records are encoded."""
    height, width = options.stored_size(*source.camera_size(cam))
    options = options.for_camera(
        cam, image=cam in source.image_keys, source_codec=source.source_codec(cam)
    )
    copied = options.codec == "copy"
    codec = source.source_codec(cam) if copied else options.stored_codec
    return Camera(
        codec=codec,
        height=height,
        width=width,
        pix_fmt=video.STORED_PIX_FMTS.get(codec, "yuv420p"),
        gop=None if copied else options.gop,
        crf=None if copied or options.codec == "lossless" else options.crf,
        source_codec=source.source_codec(cam),
    )


def _finite(x: float) -> float | None:
    """JSON has no inf: a lossless stream (PSNR inf) is stored as null."""
    return float(x) if np.isfinite(x) else None


def _write_meta(root: Path, source: LeRobotSource, rows, info: DatasetInfo) -> None:
    """Every metadata file under a temp name, then renamed (info.json last)."""
    meta = root / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    tasks = sorted(source.tasks.items())
    table = pa.table({"task_index": [i for i, _ in tasks], "task": [t for _, t in tasks]})
    strings = [k for k, f in info.features.items() if f.is_string]
    _atomic(
        root / fmt.EPISODES_PATH,
        lambda p: write_episodes(p, rows, source.camera_keys, strings),
    )
    _atomic(root / fmt.TASKS_PATH, lambda p: pq.write_table(table, p))
    fmt.write_json_atomic(root / fmt.INFO_PATH, info.to_json())
    # Normalization stats from the converted tabular data (never from video); the source's
    # image stats are carried over (jaxload.stats, docs/METADATA.md).
    write_stats(root, source.stats_json())


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def _publish(dataset: Path, out: Path) -> None:
    """Makes the finished dataset visible under its name in one rename."""
    if out.is_dir():
        out.rmdir()  # empty (checked at the start); rename cannot replace a directory
    os.rename(dataset, out)


def _already_published(state: JobState, out: Path, started: float) -> ConvertReport:
    """OUT exists: fine only when it is this job's result (killed before cleaning up)."""
    from jaxload.tools.doctor import is_jaxload_dataset

    published = state.published_fingerprint()
    if published is None or not is_jaxload_dataset(out):
        raise JaxloadError(f"{out}: already exists and is not empty; refusing to overwrite it")
    info = fmt.read_info(out)
    if info.fingerprint != published:
        raise JaxloadError(f"{out}: already exists and is not empty; refusing to overwrite it")
    return ConvertReport(
        out=out,
        episodes=info.total_episodes,
        frames=info.total_frames,
        seconds=time.perf_counter() - started,
        source_bytes=0,
        earlier=True,
        output_bytes=tree_bytes(out),
        psnr={},
    )


def _report(job: _Job, out: Path, started: float, done, stats: _RunStats) -> ConvertReport:
    return ConvertReport(
        out=out,
        episodes=len(job.selected),
        frames=job.frames,
        seconds=time.perf_counter() - started,
        source_bytes=source_file_bytes(job.source, job.selected),
        output_bytes=tree_bytes(out),
        psnr=fidelity(done, job.source.camera_keys),
        source=f"{job.source.root} (LeRobot {job.source.codebase_version})",
        engine=stats.engine,
        workers=stats.workers,
        units=len(job.units),
        resumed_units=stats.resumed,
        retries=stats.retries + job.source.files.retries,
        balance_lpt=stats.balance_lpt,
        balance_round_robin=stats.balance_round_robin,
        worker_seconds=stats.worker_seconds,
        sizes=conversion_sizes(out, job.source, job.selected),
        camera_crf=dict(job.options.camera_crf),
    )


def _nonempty(path: Path) -> bool:
    return path.exists() and (not path.is_dir() or any(path.iterdir()))
