"""`jaxload convert SRC s3://...`: conversion straight into object storage, against a real
S3-compatible server (moto's server mode, a subprocess on loopback, tests/support/s3_server.py)
with injected faults. Nothing is mocked: real conversions, real uploads through s3fs, the
real remote reader; every check compares with the same conversion written locally.

(tests/converters/test_convert_remote.py is about remote *sources*; this module is about remote OUT,
and the one check that needs this server for a source: s3:// retries.)
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxload
from jaxload import format as fmt
from jaxload.converters.convert import convert
from jaxload.converters.publish import staging_dir
from jaxload.errors import JaxloadError
from jaxload.storage.remote import RemoteOptions
from jaxload.storage.retry import RetryPolicy
from tests.support.helpers import tree_bytes

pytest.importorskip("s3fs", reason="the remote extra (pip install 'jaxload[remote]') is needed")
pytest.importorskip("moto", reason="moto[server] (the dev extra) runs the S3 test server")

from tests.support.s3_server import S3Server

pytestmark = pytest.mark.processes  # the S3 test server is a subprocess

REPO_ROOT = Path(__file__).resolve().parents[2]
# A small conversion: two episodes, the source's H.264 kept (no transcode).
OPTIONS = {"workers": 1, "progress": False, "video_codec": "copy", "episodes": "0-1"}
CLI_OPTIONS = ["--workers", "1", "--video-codec", "copy", "--episodes", "0-1", "--no-progress"]
FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)
WINDOWS = {"action": [0.0, 0.1, 0.2], "observation.image": [-0.1, 0.0]}


@pytest.fixture(scope="module")
def source(shared_lerobot):
    return shared_lerobot / "h264_single"


@pytest.fixture(scope="module")
def local(source, tmp_path_factory):
    """The same conversion, written to a local directory: what every upload must equal."""
    return convert(source, tmp_path_factory.mktemp("local") / "ds", **OPTIONS).out


@pytest.fixture(scope="module")
def server():
    server = S3Server.start()
    try:
        server.create_bucket("bucket")
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3(server):
    server.set(latency_s=0.0, fail=None)
    yield server
    server.set(latency_s=0.0, fail=None)


def _objects(server, url: str) -> dict[str, bytes]:
    """Every object under `url` (relative path -> content)."""
    fs = server.filesystem()
    root = url.removeprefix("s3://")
    return {p[len(root) + 1 :]: fs.cat_file(p) for p in sorted(fs.find(root))}


def _batches(path, storage_options=None, n=4) -> list[dict]:
    loader = jaxload.make_loader(
        path,
        global_batch_size=4,
        seed=7,
        delta_timestamps=WINDOWS,
        options=jaxload.PipelineOptions(num_workers=0),
        storage_options=storage_options,
        remote=RemoteOptions(retry=FAST_RETRY) if storage_options else None,
    )
    with loader:
        return [next(loader) for _ in range(n)]


def _assert_same_batches(a: list[dict], b: list[dict]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]), k


def test_convert_to_s3_equals_the_local_conversion_byte_for_byte(s3, source, local, tmp_path):
    url = "s3://bucket/ds"
    work = tmp_path / "work"
    report = convert(source, url, storage_options=s3.storage_options(), work_dir=work, **OPTIONS)
    assert report.out == url and "meta/info.json last" in report.summary()
    assert f"wrote {url}:" in report.summary()
    assert _objects(s3, url) == tree_bytes(local)  # every file, nothing else
    remote = jaxload.open(url, storage_options=s3.storage_options(), delta_timestamps=WINDOWS)
    here = jaxload.open(local, delta_timestamps=WINDOWS)
    assert remote.fingerprint == here.fingerprint and len(remote) == len(here)
    _assert_same_batches(_batches(url, s3.storage_options()), _batches(local))
    assert list(work.iterdir()) == []  # the staging copy and its partial state are gone


def test_info_json_is_the_last_object_and_a_rerun_finishes_the_upload(s3, source, local, tmp_path):
    url, work = "s3://bucket/half", tmp_path / "work"
    run = dict(storage_options=s3.storage_options(), work_dir=work, retry=FAST_RETRY, **OPTIONS)
    # 1. A shard's upload is denied: the run stops there, and info.json was never sent.
    s3.set(fail={"match": "/half/data/shard-00000.array_record", "status": 403, "count": 10**6})
    with pytest.raises(JaxloadError, match=rf"{url}/data/shard-00000\.array_record: access denied"):
        convert(source, url, **run)
    s3.set(fail=None)
    assert fmt.INFO_PATH not in _objects(s3, url)
    # 2. The rerun uploads the rest, but the manifest is refused: everything else is there.
    s3.set(fail={"match": "/half/meta/info.json", "status": 403, "count": 10**6})
    with pytest.raises(JaxloadError, match=rf"{url}/meta/info\.json") as failed:
        convert(source, url, **run)
    assert "rerun the same command" in str(failed.value)
    s3.set(fail=None)
    expected = tree_bytes(local)
    uploaded = _objects(s3, url)
    assert uploaded == {k: v for k, v in expected.items() if k != fmt.INFO_PATH}
    # Without its manifest the prefix is not a dataset to any reader.
    with pytest.raises(JaxloadError, match=rf"{url}/meta/info\.json: missing"):
        jaxload.open(url, storage_options=s3.storage_options())
    staging = staging_dir(url, work)
    assert (staging / fmt.INFO_PATH).is_file()  # the finished local copy waits for the rerun
    # 3. Fault cleared: the same command finishes, keeping what was already uploaded.
    report = convert(source, url, **run)
    summary = report.summary()
    assert f"{len(expected) - 1} already there (resumed)" in summary
    # converted by the first run: no input rate or size ratio of a run that read nothing
    assert "converted by an earlier run of this command" in summary
    assert "the source" not in summary and "input:" not in summary and "units on" not in summary
    assert _objects(s3, url) == expected
    _assert_same_batches(_batches(url, s3.storage_options()), _batches(local))
    assert list(work.iterdir()) == []


def test_transient_errors_are_retried_and_the_upload_succeeds(s3, source, local, tmp_path):
    url = "s3://bucket/flaky"
    # botocore's and s3fs's own retries are off (jaxload.storage.urls): every fault is the
    # converter's retry policy's to retry, 3 here (FAST_RETRY makes 4 attempts).
    s3.reset_counters()
    s3.set(fail={"match": "/flaky/data/shard-00000.array_record", "status": 503, "count": 3})
    report = convert(
        source,
        url,
        storage_options=s3.storage_options(),
        work_dir=tmp_path,
        retry=FAST_RETRY,
        **OPTIONS,
    )
    assert report.retries == 3 and "transient errors retried" in report.summary()
    assert s3.counters()["requests"] > 3
    assert _objects(s3, url) == tree_bytes(local)


def test_a_destination_holding_anything_is_refused_and_left_untouched(s3, source, local, tmp_path):
    fs = s3.filesystem()
    fs.pipe_file("bucket/taken/notes.txt", b"mine")
    work = tmp_path / "work"
    run = dict(storage_options=s3.storage_options(), work_dir=work, **OPTIONS)
    with pytest.raises(JaxloadError, match=r"s3://bucket/taken: already holds 1 object\(s\)"):
        convert(source, "s3://bucket/taken", **run)
    assert _objects(s3, "s3://bucket/taken") == {"notes.txt": b"mine"}
    s3.upload(str(local), "s3://bucket/existing")
    before = _objects(s3, "s3://bucket/existing")
    with pytest.raises(JaxloadError, match=r"s3://bucket/existing: already holds a jaxload"):
        convert(source, "s3://bucket/existing", **run)
    assert _objects(s3, "s3://bucket/existing") == before
    assert not work.exists() or list(work.iterdir()) == []  # refused before converting
    with pytest.raises(JaxloadError, match=r"bucket 'nowhere' does not exist"):
        convert(source, "s3://nowhere/ds", **run)


def _cli(server, out: str, *args: str, env: dict | None = None, endpoint_env=True):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))}
    environ |= {"PYTHONPATH": str(REPO_ROOT), **(env or {})}
    if endpoint_env:  # credentials and endpoint the fsspec/AWS way, as a user would
        environ |= {
            "FSSPEC_S3_ENDPOINT_URL": server.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    return subprocess.run(
        [sys.executable, "-m", "jaxload.cli", "convert", *args, out, *CLI_OPTIONS],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_upload_killed_midway_is_finished_by_rerunning_it(s3, source, local, tmp_path):
    url, work = "s3://bucket/cli", tmp_path / "work"
    args = (str(source), "--work-dir", str(work), "--keep-local")
    kill_at = "JAXLOAD_TEST_KILL_AT"
    # SIGKILL after the 2nd object landed: a half upload, invisible to readers.
    killed = _cli(s3, url, *args, env={kill_at: "upload-file:2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    partial = _objects(s3, url)
    assert len(partial) >= 2 and fmt.INFO_PATH not in partial
    # SIGKILL after the upload completed, before the cleanup.
    killed = _cli(s3, url, *args, env={kill_at: "upload-complete:1"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (staging_dir(url, work).parent / f".{staging_dir(url, work).name}.partial").is_dir()
    # The same command once more: only the cleanup is left.
    done = _cli(s3, url, *args)
    assert done.returncode == 0, done.stderr
    assert f"upload to {url} had completed" in done.stdout
    assert _objects(s3, url) == tree_bytes(local)
    kept = staging_dir(url, work)
    assert tree_bytes(kept) == tree_bytes(local)  # --keep-local
    assert [p.name for p in work.iterdir()] == [kept.name]  # the partial state is gone


def test_cli_exits_0_and_nonzero_with_the_url_on_a_permanent_failure(s3, source, local, tmp_path):
    # Endpoint and credentials given as --storage-option this time, none in the environment.
    options = [
        f"--storage-option=endpoint_url={s3.endpoint}",
        "--storage-option=key=testing",
        "--storage-option=secret=testing",
        '--storage-option=client_kwargs={"region_name": "us-east-1"}',
    ]
    args = (str(source), "--work-dir", str(tmp_path), *options)
    ok = _cli(s3, "s3://bucket/cli-ok", *args, endpoint_env=False)
    assert ok.returncode == 0, ok.stderr
    assert "wrote s3://bucket/cli-ok:" in ok.stdout
    assert _objects(s3, "s3://bucket/cli-ok") == tree_bytes(local)
    s3.set(fail={"match": "/bucket/cli-denied/", "status": 403, "count": 10**6})
    denied = _cli(s3, "s3://bucket/cli-denied", *args, endpoint_env=False)
    assert denied.returncode == 1
    assert "jaxload convert: error: s3://bucket/cli-denied/" in denied.stderr
    assert "access denied" in denied.stderr


def test_an_s3_source_that_keeps_failing_is_asked_once_per_retry(
    server, source, tmp_path, monkeypatch
):
    # The converter read s3:// sources through a filesystem built without jaxload's S3
    # defaults: botocore's and s3fs's own retries ran under each of jaxload's (a
    # persistent HTTP 500 asked many times per retry, and took minutes to fail).
    import fsspec.config

    options = server.storage_options()
    monkeypatch.setitem(fsspec.config.conf, "s3", options)  # the endpoint, the fsspec way
    server.upload(str(source), "s3://bucket/src")
    server.set(fail={"match": "/src/meta/info.json", "status": 500, "count": 1000})
    server.reset_counters()
    try:
        with pytest.raises(JaxloadError, match=r"src/meta/info\.json"):
            convert(
                "s3://bucket/src",
                tmp_path / "out",
                retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.01),
                **OPTIONS,
            )
        assert server.counters()["failed"] == 2
    finally:
        server.set(fail=None)


def test_missing_credentials_are_said_as_such_not_as_a_missing_bucket(
    server, source, tmp_path, monkeypatch
):
    # s3fs's exists() is False for a bucket it cannot ask about for any reason: before,
    # no credentials read as "bucket 'bucket' does not exist".
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    endpoint_only = {"client_kwargs": server.storage_options()["client_kwargs"]}
    with pytest.raises(JaxloadError, match="no credentials found") as caught:
        convert(source, "s3://bucket/nocreds", storage_options=endpoint_only, **OPTIONS)
    assert "does not exist" not in str(caught.value)
