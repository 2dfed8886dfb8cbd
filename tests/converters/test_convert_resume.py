"""Crash safety: a conversion killed with SIGKILL and rerun is byte-identical to a clean
one; a second converter on the same output is refused; nothing partial is ever visible.

The kills are real SIGKILLs of real `jaxload convert` processes: at exact step boundaries
of the recorded state (the JAXLOAD_TEST_KILL_AT hook makes the converter SIGKILL itself
there: after a part lands, after a unit's record, after a shard file, after its
checkpoint, after the metadata, after the published marker, after the rename), and from
outside at an arbitrary moment while two worker processes are converting.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jaxload
from jaxload.converters.convert import convert
from jaxload.converters.lock import ConversionLocked, JobLock
from jaxload.converters.partial import KILL_AT_ENV, partial_dir
from jaxload.errors import JaxloadError
from tests.support.helpers import tree_bytes
from tests.support.lerobot_factory import write_lerobot_v3

pytestmark = pytest.mark.integration

LENGTHS = (20, 6, 30, 12, 3, 25, 9, 15)
SHARD_MB = 0.015625  # 16 KiB: several shards, so assembly has checkpoints to resume from
SHARD_BYTES = int(SHARD_MB * 2**20)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_lerobot_v3(
        tmp_path_factory.mktemp("resume") / "src",
        episode_lengths=LENGTHS,
        episodes_per_data_file=3,
        episodes_per_video_file=3,
    )


@pytest.fixture(scope="module")
def clean(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "ds"
    convert(source, out, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    assert jaxload.open(out).info.num_shards >= 3
    return tree_bytes(out)


def _cli(source, out, *extra, kill_at=None, workers=1):
    env = dict(os.environ)
    env.pop(KILL_AT_ENV, None)
    if kill_at:
        env[KILL_AT_ENV] = kill_at
    args = ["convert", str(source), str(out), "--workers", str(workers), "--no-progress"]
    return subprocess.Popen(
        [sys.executable, "-m", "jaxload.cli", *args, "--shard-mb", str(SHARD_MB), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process, timeout=300):
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout, stderr


def _nothing_visible(out: Path) -> None:
    """Before completion OUT does not exist; the partial directory is no dataset."""
    assert not out.exists()
    assert not (partial_dir(out) / "meta").exists()


KILL_POINTS = [
    "unit-part:1",  # a part is in place, its unit not yet recorded
    "unit-record:3",  # three units recorded
    "shard-file:1",  # assembly: a shard renamed, not yet checkpointed
    "shard-checkpoint:2",  # two shards checkpointed, their parts deleted
    "meta:1",  # metadata written, not yet marked published
    "published:1",  # marked, not yet renamed
    "renamed:1",  # OUT exists, the partial directory not yet removed
]


@pytest.mark.processes  # several `jaxload convert` processes (~4 s start-up each)
def test_sigkill_at_every_step_boundary_then_rerun_is_byte_identical(source, clean, tmp_path):
    out = tmp_path / "ds"
    for point in KILL_POINTS:
        code, _, stderr = _finish(_cli(source, out, kill_at=point))
        assert code == -signal.SIGKILL, (point, stderr)
        if point != "renamed:1":
            _nothing_visible(out)
        assert partial_dir(out).is_dir()
    code, _, stderr = _finish(_cli(source, out))
    assert code == 0, stderr
    assert tree_bytes(out) == clean
    assert not partial_dir(out).exists()


@pytest.mark.processes  # several `jaxload convert` processes (~4 s start-up each)
def test_sigkill_of_a_two_worker_run_leaves_no_orphans_and_resumes(source, clean, tmp_path):
    out = tmp_path / "ds"
    process = _cli(source, out, workers=2)
    units = partial_dir(out) / "units"
    deadline = time.monotonic() + 120
    while not (units.is_dir() and len(list(units.glob("unit-*.json"))) >= 2):
        assert process.poll() is None, _finish(process)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    workers = _children(process.pid)
    assert workers, "expected worker processes"
    process.send_signal(signal.SIGKILL)
    assert _finish(process)[0] == -signal.SIGKILL
    _nothing_visible(out)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers), "workers outlived the killed converter"
    code, stdout, stderr = _finish(_cli(source, out, workers=1))  # another worker count
    assert code == 0, stderr
    assert "units resumed" in stdout
    assert tree_bytes(out) == clean


@pytest.mark.processes  # several `jaxload convert` processes (~4 s start-up each)
def test_a_second_converter_is_refused(source, clean, tmp_path):
    out = tmp_path / "ds"
    with JobLock(partial_dir(out), what=str(out)):
        with pytest.raises(
            ConversionLocked, match=rf"another `jaxload convert` \(pid {os.getpid()} on "
        ):
            convert(source, out, workers=1, progress=False)
        code, _, stderr = _finish(_cli(source, out))
        assert code == 1 and f"pid {os.getpid()} on" in stderr and "Traceback" not in stderr
    _nothing_visible(out)
    # Two real converters: the one that holds the lock finishes, the other is refused.
    first = _cli(source, out)
    lock = partial_dir(out) / "lock"
    deadline = time.monotonic() + 120
    while not (lock.exists() and f"pid {first.pid} " in lock.read_text()):
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(ConversionLocked, match=rf"pid {first.pid} on"):
        convert(source, out, workers=1, progress=False)
    code, _, stderr = _finish(first)
    assert code == 0, stderr
    assert tree_bytes(out) == clean


@pytest.mark.processes
def test_other_arguments_do_not_resume_someone_elses_work(source, tmp_path):
    out = tmp_path / "ds"
    assert _finish(_cli(source, out, kill_at="unit-record:2"))[0] == -signal.SIGKILL
    with pytest.raises(JaxloadError, match=r"holds an interrupted conversion .* add --restart"):
        convert(source, out, crf=20, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    assert (partial_dir(out) / "units/unit-00000.json").exists()  # untouched
    report = convert(
        source, out, crf=20, workers=1, shard_bytes=SHARD_BYTES, restart=True, progress=False
    )
    assert (
        report.resumed_units == 0
        and jaxload.open(out).info.cameras["observation.images.top"].crf == 20
    )


def test_bad_input_keeps_finished_units_for_the_rerun(source, clean, tmp_path):
    import shutil

    src = shutil.copytree(source, tmp_path / "src")
    video = src / "videos/observation.images.top/chunk-000/file-002.mp4"  # episodes 6, 7
    good = video.read_bytes()
    video.write_bytes(b"")
    out = tmp_path / "ds"
    with pytest.raises(
        JaxloadError, match=r"file-002\.mp4: empty file .*\n\(the finished work is kept"
    ):
        convert(src, out, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    _nothing_visible(out)
    video.write_bytes(good)
    report = convert(src, out, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    assert report.resumed_units == 6
    assert tree_bytes(out) == clean


def _add_to_action(data: Path, amount: float) -> list:
    """Rewrites a data parquet in place with `amount` added to every action; the old rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(data)
    field = table.schema.field("action")
    action = table.column("action").to_pylist()
    fixed = [[v + amount for v in row] for row in action]
    column = table.schema.get_field_index("action")
    pq.write_table(table.set_column(column, field, pa.array(fixed, field.type)), data)
    return action


def test_a_source_file_fixed_in_place_is_converted_again_on_resume(source, tmp_path):
    """Before, the resume identity covered only the source's metadata: a data parquet fixed
    in place between the interrupted run and the rerun left the units converted from its
    old values in the output ("6 units resumed", rc 0)."""
    import shutil

    import numpy as np

    src = shutil.copytree(source, tmp_path / "src")
    video = src / "videos/observation.images.top/chunk-000/file-002.mp4"  # episodes 6, 7
    good = video.read_bytes()
    video.write_bytes(b"")
    out = tmp_path / "ds"
    with pytest.raises(JaxloadError, match=r"file-002\.mp4: empty file"):
        convert(src, out, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    video.write_bytes(good)
    # Episodes 3, 4, 5, converted already (in this process too: nothing read is kept stale).
    action = _add_to_action(src / "data/chunk-000/file-001.parquet", 1000.0)
    report = convert(src, out, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    assert report.resumed_units == 3  # episodes 0, 1, 2
    clean = tmp_path / "clean"
    convert(src, clean, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    assert tree_bytes(out) == tree_bytes(clean)
    ds = jaxload.open(out)
    start = ds.episode_data_index["from"][3]
    assert np.allclose(ds[int(start)]["action"], np.asarray(action[0]) + 1000.0)


@pytest.mark.processes  # `jaxload convert` processes (~4 s start-up each)
def test_a_source_file_fixed_during_assembly_is_converted_again_on_resume(source, tmp_path):
    """Killed after two shards were assembled (their units' parts deleted), then a data
    parquet those shards hold is fixed: the rerun converts its units again and assembles
    from the first shard holding them, equal to a clean conversion of the fixed source."""
    import shutil

    src = shutil.copytree(source, tmp_path / "src")
    out = tmp_path / "ds"
    code, _, stderr = _finish(_cli(src, out, kill_at="shard-checkpoint:2"))
    assert code == -signal.SIGKILL, stderr
    _add_to_action(src / "data/chunk-000/file-000.parquet", 1000.0)  # episodes 0, 1, 2
    code, _, stderr = _finish(_cli(src, out))
    assert code == 0, stderr
    clean = tmp_path / "clean"
    convert(src, clean, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    assert tree_bytes(out) == tree_bytes(clean)


def test_published_output_is_not_rewritten(source, clean, tmp_path):
    out = tmp_path / "ds"
    convert(source, out, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    with pytest.raises(JaxloadError, match="already exists and is not empty"):
        convert(source, out, workers=1, shard_bytes=SHARD_BYTES, progress=False)
    assert tree_bytes(out) == clean and not partial_dir(out).exists()


def _children(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
