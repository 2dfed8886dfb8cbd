"""`jaxload info`, `stats` and `doctor` on dataset URLs, against the real S3-compatible test
server (tests/support/s3_server.py): a converted dataset in a bucket is described, and checked,
exactly as its local copy is; a URL with nothing there fails with one line naming it.
Also the remote errors a reader of a converted dataset meets (a missing bucket, a
persistent HTTP 500).

The dataset and the server are tests/converters/test_convert_to_s3.py's fixtures (two episodes of
the h264_single fixture, converted locally once per module).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import jaxload
from jaxload import format as fmt
from jaxload.cli import main
from jaxload.errors import JaxloadError, RemoteError
from jaxload.format import chunks
from jaxload.storage.retry import TRANSIENT, RetryPolicy, call_with_retries
from jaxload.storage.urls import filesystem

pytest.importorskip("s3fs", reason="the remote extra (pip install 'jaxload[remote]') is needed")
pytest.importorskip("moto", reason="moto[server] (the dev extra) runs the S3 test server")

import tests.converters.test_convert_to_s3 as to_s3

pytestmark = pytest.mark.processes  # the S3 test server is a subprocess

# tests/converters/test_convert_to_s3.py's fixtures, reused: the S3 server (`server`, `s3`: faults
# cleared around each test), the LeRobot source and its local conversion.
server, s3, source, local = to_s3.server, to_s3.s3, to_s3.source, to_s3.local

URL = "s3://bucket/cli-remote"
COMMANDS = ("info", "stats", "doctor")


def _options(server) -> list[str]:
    """The server's endpoint and credentials as --storage-option flags (nothing in the
    environment: the in-process runs below must not depend on it)."""
    return [
        f"--storage-option=endpoint_url={server.endpoint}",
        "--storage-option=key=testing",
        "--storage-option=secret=testing",
        '--storage-option=client_kwargs={"region_name": "us-east-1"}',
    ]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    """`jaxload ARGV` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _one_error_line(status: int, err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert status == 1, err
    assert len(lines) == 1 and lines[0].startswith(f"jaxload {command}: error: "), err
    assert "Traceback" not in err and "/jaxload-meta-" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def dataset_url(server, local):
    server.upload(str(local), URL)
    return URL


@pytest.fixture(autouse=True)
def _no_aws_environment(monkeypatch):
    """Credentials and endpoint come from --storage-option only."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "FSSPEC_")):
            monkeypatch.delenv(name)


# --- the commands on a dataset URL ---------------------------------------------------------


@pytest.mark.parametrize("args", [(), ("--json",)])
def test_info_on_a_dataset_url_equals_info_on_its_local_copy(s3, local, dataset_url, capsys, args):
    status, here, _ = _run(capsys, "info", str(local), *args)
    assert status == 0
    status, there, err = _run(capsys, "info", dataset_url, *args, *_options(s3))
    assert status == 0, err
    assert there == here.replace(str(local), dataset_url)
    if not args:
        assert there.startswith(
            f"{dataset_url}: jaxload dataset, format version {fmt.FORMAT_VERSION}\n"
        )
        assert "MiB" in there and "stats (every dimension" in there


@pytest.mark.parametrize("args", [(), ("--json",), ("--key", "action")])
def test_stats_on_a_dataset_url_equals_stats_of_its_local_copy(
    s3, local, dataset_url, capsys, args
):
    status, here, _ = _run(capsys, "stats", str(local), *args)
    assert status == 0
    status, there, err = _run(capsys, "stats", dataset_url, *args, *_options(s3))
    assert status == 0, err
    assert there == here.replace(str(local), dataset_url)


def test_stats_of_an_unknown_key_names_the_url_not_a_temporary_copy(s3, dataset_url, capsys):
    status, _, err = _run(capsys, "stats", dataset_url, "--key", "nope", *_options(s3))
    line = _one_error_line(status, err, "stats")
    assert line.startswith(f"jaxload stats: error: {dataset_url}: no stats for 'nope' (has: ")


def test_doctor_on_a_dataset_url_runs_every_check_remotely(s3, local, dataset_url, capsys):
    status, here, _ = _run(capsys, "doctor", str(local))
    assert status == 0
    s3.reset_counters()
    status, there, err = _run(capsys, "doctor", dataset_url, *_options(s3))
    assert status == 0, err
    assert there.startswith(f"{dataset_url} (jaxload dataset)\n")
    assert there == here.replace(str(local), dataset_url)  # same checks, same fingerprint
    assert "0 failed, 8 passed" in there
    assert s3.counters()["requests"] > 0


def test_doctor_on_a_damaged_dataset_url_fails_naming_the_object(s3, local, tmp_path, capsys):
    """A byte of record 1 flipped in the shard in storage (the shard is padded past its
    records: a byte there is read by no one): the shard check fails, naming the object."""
    url = "s3://bucket/cli-damaged"
    s3.upload(str(local), url)
    shard = f"{url}/{fmt.shard_path(0)}"
    fs = s3.filesystem()
    offsets = np.frombuffer(fs.cat_file(f"{url}/{fmt.offsets_path(0)}"), chunks.OFFSET_DTYPE)
    data = bytearray(fs.cat_file(shard))
    data[(int(offsets[1]) + int(offsets[2])) // 2] ^= 0xFF
    fs.pipe_file(shard, bytes(data))
    status, out, err = _run(capsys, "doctor", url, *_options(s3))
    assert status == 1, out + err
    failed = [line for line in out.splitlines() if line.startswith("[FAIL]")]
    assert len(failed) == 1, out
    assert failed[0].startswith("[FAIL] every shard exists and holds the records"), out
    assert f"{shard}: record " in failed[0], out
    assert "1 failed, 3 passed" in out


def test_lerobot_source_at_a_url_is_described_as_one(s3, source, capsys):
    url = "s3://bucket/cli-lerobot"
    s3.upload(str(source), url)
    status, here, _ = _run(capsys, "info", str(source))
    assert status == 0
    status, there, err = _run(capsys, "info", url, *_options(s3))
    assert status == 0, err
    assert there == here.replace(str(source), url)
    assert "LeRobot v3.0 dataset (not converted)" in there
    status, _, err = _run(capsys, "stats", url, *_options(s3))
    line = _one_error_line(status, err, "stats")
    assert f"{url} is a LeRobot dataset (v3.0), not a jaxload dataset" in line
    assert f"`jaxload convert {url} OUT`" in line
    status, out, err = _run(capsys, "doctor", url, *_options(s3))
    assert status == 0, out + err
    assert out.startswith(f"{url} (LeRobot source)\n") and "0 failed" in out


# --- errors: one line naming the URL ------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_a_url_with_no_dataset_is_one_line_naming_it(s3, capsys, command):
    url = "s3://bucket/nothing-here"
    status, _, err = _run(capsys, command, url, *_options(s3))
    line = _one_error_line(status, err, command)
    assert f"{url}/meta/info.json: missing (no jaxload or LeRobot dataset at {url}" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_bucket_is_said_to_be_one(s3, capsys, command):
    status, _, err = _run(capsys, command, "s3://nowhere/ds", *_options(s3))
    line = _one_error_line(status, err, command)
    assert "s3://nowhere/ds/meta/info.json: bucket 'nowhere' does not exist" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_denied_url_is_one_line_naming_it(s3, dataset_url, capsys, command):
    s3.set(fail={"match": "/bucket/cli-remote/", "status": 403, "count": 10**6})
    status, _, err = _run(capsys, command, dataset_url, *_options(s3))
    line = _one_error_line(status, err, command)
    assert f"{dataset_url}/meta/info.json: " in line


@pytest.mark.parametrize("command", COMMANDS)
def test_storage_options_for_a_local_path_are_refused(local, capsys, command):
    status, _, err = _run(capsys, command, str(local), "--storage-option", "anon=true")
    line = _one_error_line(status, err, command)
    assert line.endswith(
        f"{local}: --storage-option applies only to a URL (s3://, gs://, hf://, https://)"
    )


@pytest.mark.parametrize("command", [*COMMANDS, "convert"])
def test_a_malformed_storage_option_is_a_usage_error(capsys, command):
    args = [command, "s3://bucket/x", *(["out"] if command == "convert" else [])]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--storage-option", "anon"])
    assert exit_.value.code == 2
    assert "argument --storage-option: 'anon': expected KEY=VALUE" in capsys.readouterr().err


def test_the_console_command_reads_a_dataset_url_with_the_environments_endpoint(
    s3, dataset_url, tmp_path
):
    """The real command line: endpoint and credentials the fsspec/AWS way, as a user sets
    them; success on stdout, a failure as one line on stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))}
    env |= {
        "PYTHONPATH": str(to_s3.REPO_ROOT),
        "FSSPEC_S3_ENDPOINT_URL": s3.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "jaxload.cli", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

    ok = cli("stats", dataset_url, "--out", "stats.json")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "stats.json").is_file()
    failed = cli("info", "s3://nowhere/ds")
    assert failed.returncode == 1
    assert failed.stderr.startswith("jaxload info: error: s3://nowhere/ds/meta/info.json: bucket")
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr


# --- the library on the same errors ---------------------------------------------------------


def test_open_of_a_missing_bucket_says_so(s3):
    with pytest.raises(JaxloadError, match=r"bucket 'nowhere' does not exist") as error:
        jaxload.open("s3://nowhere/ds", storage_options=s3.storage_options())
    assert isinstance(error.value, RemoteError)
    assert "a jaxload dataset" not in str(error.value)  # the bucket is the problem


def test_a_persistent_500_through_s3fs_is_retried_by_jaxload_then_reported(s3, dataset_url):
    """A ranged GET through s3fs (one request, no HEAD), botocore's own retries off (as the
    upload test does): the 500s reach jaxload's policy, are classified as transient (botocore
    keeps the status in a dict), retried, and reported with the number of attempts. Before,
    s3fs's OSError read as permanent and was not retried."""
    options = s3.storage_options() | {"config_kwargs": {"retries": {"max_attempts": 0}}}
    fs, root = filesystem(dataset_url, options)
    shard = fmt.shard_path(0)
    policy = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02)
    s3.set(fail={"match": f"/cli-remote/{shard}", "status": 500, "count": 10**6})
    with pytest.raises(RemoteError, match=rf"{shard}: giving up after 3 attempts") as error:
        call_with_retries(
            lambda: fs.cat_file(f"{root}/{shard}", start=0, end=64),
            what=f"{dataset_url}/{shard}",
            policy=policy,
        )
    assert error.value.kind == TRANSIENT
