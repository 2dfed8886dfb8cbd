"""commands/doctor.py: `jaxload doctor` tells a LeRobot source from a jaxload dataset,
prints a line per check and exits with the number of failed checks."""

from __future__ import annotations

import shutil

from jaxload.cli import main


def test_a_healthy_source_is_ready_to_convert(lerobot_src, capsys):
    assert main(["doctor", str(lerobot_src)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{lerobot_src} (LeRobot source)"
    assert all(line.startswith("[  ok]") for line in lines[1:-2])
    assert lines[-2] == f"0 failed, {len(lines) - 3} passed"
    assert lines[-1] == f"ready to convert: jaxload convert {lerobot_src} OUT"


def test_a_converted_dataset_is_checked_as_one(converted, capsys):
    assert main(["doctor", str(converted)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{converted} (jaxload dataset)\n")
    assert "0 failed" in out and "ready to convert" not in out


def test_the_exit_status_counts_failed_checks(lerobot_src, tmp_path, capsys):
    src = shutil.copytree(lerobot_src, tmp_path / "src")
    (src / "videos/observation.images.top/chunk-000/file-000.mp4").write_bytes(b"")
    status = main(["doctor", str(src)])
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("[FAIL]")]
    assert status == len(failed) == 1 and "file-000.mp4" in failed[0]
    assert f"{status} failed" in out and "ready to convert" not in out


def test_storage_options_for_a_local_path_are_refused(lerobot_src, capsys):
    assert main(["doctor", str(lerobot_src), "--storage-option", "anon=true"]) == 1
    assert capsys.readouterr().err.startswith("jaxload doctor: error: ")
