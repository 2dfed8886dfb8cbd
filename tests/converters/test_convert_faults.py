"""`jaxload convert` under faults, through the real CLI in a subprocess: Ctrl-C, a full
disk, a read-only output, an output path that is (or is under) a file. Each ends with one
line that says what happened and what a rerun does, exit status non-zero, no traceback
(unless --debug or JAXLOAD_DEBUG=1); the rerun after Ctrl-C or a full disk resumes."""

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lerobot_factory import write_lerobot_v3

pytestmark = pytest.mark.processes  # each test runs `jaxload convert` in a subprocess

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "jaxload.cli", "convert"]
RESUMES = "rerun the same command to resume: the episodes already converted are kept"
# The CLI as at a terminal, Ctrl-C raising KeyboardInterrupt: a test run started in the
# background (`cmd &` in a script) ignores SIGINT, which Python and the converter inherit.
AT_A_TERMINAL = [
    sys.executable,
    "-c",
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'jaxload'; runpy.run_module('jaxload.cli', run_name='__main__')",
]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """12 short episodes with one camera: several units per worker, quick to convert."""
    root = tmp_path_factory.mktemp("convert_faults")
    return write_lerobot_v3(root / "src", episode_lengths=[24] * 12, cameras={"top": (48, 64)})


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture(scope="module")
def long_source(tmp_path_factory):
    """Long enough (~10 s to convert here) that Ctrl-C lands mid-run on a fast machine too:
    with `source`, CI once saw the conversion finish before the signal arrived."""
    root = tmp_path_factory.mktemp("convert_faults_long")
    return write_lerobot_v3(root / "src", episode_lengths=[160] * 12, cameras={"top": (96, 128)})


def test_ctrl_c_says_a_rerun_resumes_and_it_does(long_source, tmp_path):
    source = long_source
    out = tmp_path / "out"
    run = subprocess.Popen(
        [*AT_A_TERMINAL, "convert", str(source), str(out), "--workers", "2"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # Ctrl-C goes to the terminal's whole process group
    )
    seen = b""
    while not re.search(rb" [1-9]\d*/12 episodes", seen):
        chunk = os.read(run.stderr.fileno(), 4096)
        assert chunk, seen.decode()[-2000:]
        seen += chunk
    os.killpg(run.pid, signal.SIGINT)
    stderr = (seen + run.stderr.read()).decode()
    assert run.wait(timeout=60) == 130, stderr[-3000:]
    assert stderr.rstrip().endswith(f"jaxload convert: interrupted; {RESUMES}"), stderr[-2000:]
    assert "Traceback" not in stderr and "AttributeError" not in stderr
    assert not out.exists()
    rerun = _cli(str(source), str(out), "--workers", "2", "--no-progress")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert re.search(r"\b[1-9]\d* units resumed", rerun.stdout), rerun.stdout


def test_an_output_that_is_a_file_or_under_one_is_refused(source, tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    run = _cli(str(source), str(empty))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert f"{empty}: is a file, not a directory; nothing was written" in run.stderr
    assert "not empty" not in run.stderr and empty.read_bytes() == b""
    run = _cli(str(source), str(empty / "out"))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert f"cannot be created under {empty}, a file; nothing was written" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    # The Python API says the same (the checks live in the converter, not the CLI).
    from jaxload.converters.convert import convert
    from jaxload.errors import JaxloadError

    with pytest.raises(JaxloadError, match="is a file, not a directory; nothing was written"):
        convert(source, empty, progress=False)


def _private_mounts_work(tmp_path: Path) -> bool:
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs tmpfs {tmp_path}"],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.fixture
def mount_point(tmp_path):
    """A directory to mount a private tmpfs on (skips where unprivileged mounts are off)."""
    point = tmp_path / "mnt"
    point.mkdir()
    if shutil.which("unshare") is None or not _private_mounts_work(point):
        pytest.skip("needs `unshare -rm` (user and mount namespaces) to mount a small tmpfs")
    return point


def _in_private_mount(script: str) -> subprocess.CompletedProcess:
    """`script` (sh) in a mount namespace of its own: its mounts vanish with it."""
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_full_disk_says_free_space_and_rerun_and_the_rerun_resumes(source, mount_point):
    # One worker: units finish one after another, so the first is complete before the disk
    # fills, whatever the timing (with two, both first units can die half-written: CI saw it).
    cli = " ".join(CLI)
    convert = f"{cli} {source} {mount_point}/out --workers 1 --no-progress"
    run = _in_private_mount(
        f"mount -t tmpfs -o size=160k tmpfs {mount_point} && {convert}; echo RC=$?; "
        f"mount -o remount,size=64m {mount_point} && {convert}; echo RC=$?"
    )
    first, second = run.stdout.split("RC=")[1:3]
    assert first.startswith("1"), run.stdout + run.stderr
    assert second.startswith("0"), run.stdout + run.stderr
    assert "jaxload convert: error: no space left on device (" in run.stderr
    assert f"Free some space, then {RESUMES}" in run.stderr
    assert "Traceback" not in run.stderr
    assert re.search(r"\b[1-9]\d* units resumed", run.stdout), run.stdout


def test_a_read_only_output_is_one_line_and_debug_shows_the_traceback(source, mount_point):
    convert = f"{' '.join(CLI)} {source} {mount_point}/out --workers 1 --no-progress"
    run = _in_private_mount(f"mount -t tmpfs -o ro tmpfs {mount_point} && {convert}; echo RC=$?")
    assert "RC=1" in run.stdout, run.stdout + run.stderr
    assert f"jaxload convert: error: {mount_point}/out: read-only file system (" in run.stderr
    assert "Traceback" not in run.stderr
    for debug in (f"JAXLOAD_DEBUG=1 {convert}", f"{convert} --debug"):
        run = _in_private_mount(f"mount -t tmpfs -o ro tmpfs {mount_point} && {debug}")
        assert "Traceback" in run.stderr and "read-only file system" in run.stderr
