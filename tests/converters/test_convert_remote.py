"""Remote sources: a hub dataset id and fsspec URLs, with transient and permanent faults.

There is no network here, so the transport is the one thing mocked (and only it): a
local directory stands in for the hub behind the converter's `HubClient` protocol
(tests/support/remote_fakes.py), and fsspec's real local filesystem gets injected read faults.
Files, conversion, processes and outputs are all real. One test points the real
huggingface_hub at a closed port on loopback: nothing reachable, no hang.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
import requests
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

from jaxload.converters.convert import convert
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.errors import JaxloadError
from jaxload.storage import retry as remote
from jaxload.storage.retry import RetryPolicy
from tests.support.helpers import tree_bytes
from tests.support.lerobot_factory import write_lerobot_v3
from tests.support.remote_fakes import SHA, Faults, FaultyFileSystem, LocalHub, downloads

pytestmark = pytest.mark.integration

REPO = "org/ds"
LENGTHS = (4, 7, 2, 5, 3)
FAST = {"base_delay": 0.001, "max_delay": 0.004}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A v3.0 dataset, its plain local conversion, and a hub directory holding it."""
    root = tmp_path_factory.mktemp("remote")
    src = write_lerobot_v3(
        root / "src", episode_lengths=LENGTHS, episodes_per_data_file=2, episodes_per_video_file=2
    )
    convert(src, root / "local", workers=1, progress=False)
    shutil.copytree(src, root / "hub" / REPO)
    return src, root / "local", root / "hub"


def _same_content(a: Path, b: Path, *, except_source=False) -> None:
    """Same shards and metadata; `except_source`: info.json may differ in "source" only."""
    x, y = tree_bytes(a), tree_bytes(b)
    assert sorted(x) == sorted(y)
    for name in x:
        if name == "meta/info.json" and except_source:
            ix, iy = json.loads(x[name]), json.loads(y[name])
            ix.pop("source"), iy.pop("source")
            assert ix == iy
        else:
            assert x[name] == y[name], name


def test_hub_id_retries_transient_faults_and_matches_a_local_conversion(dataset, tmp_path):
    src, local, hub = dataset
    faults = Faults(str(tmp_path / "faults"), transient=2)
    waits = []
    policy = RetryPolicy(attempts=4, sleep=waits.append, **FAST)
    report = convert(
        REPO,
        tmp_path / "out",
        hub_client=LocalHub(hub, faults),
        retry=policy,
        workers=1,
        progress=False,
    )
    fetched = downloads(faults)
    # Every request failed twice (503, then a reset connection) before it succeeded.
    assert report.retries == faults.total_failures() == 2 * (len(fetched) + 1)
    assert len(waits) == report.retries and max(waits) <= FAST["max_delay"]
    assert sorted(fetched) == sorted(
        p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()
    )
    _same_content(tmp_path / "out", local, except_source=True)
    source = json.loads((tmp_path / "out/meta/info.json").read_text())["source"]
    assert source["repo_id"] == REPO and source["revision"] == SHA
    assert os.listdir(tmp_path) == ["faults", "out"]  # partial directory and cache are gone


def test_hub_id_fetches_only_what_the_selected_episodes_need(dataset, tmp_path):
    src, _, hub = dataset
    faults = Faults(str(tmp_path / "faults"))
    convert(
        REPO,
        tmp_path / "out",
        hub_client=LocalHub(hub, faults),
        episodes="3",
        workers=1,
        progress=False,
    )
    local = LeRobotV3Source(src)
    meta = {p for p in downloads(faults) if p.startswith("meta/")}
    assert set(downloads(faults)) - meta == set(local.episode_files(3))
    assert len(downloads(faults)) == len(set(downloads(faults)))  # each file fetched once


def test_hub_permanent_fault_fails_fast_naming_the_file(dataset, tmp_path):
    _, _, hub = dataset
    faults = Faults(str(tmp_path / "faults"), permanent="videos/*/file-001.mp4")
    started = time.monotonic()
    with pytest.raises(JaxloadError) as error:
        convert(
            REPO,
            tmp_path / "out",
            hub_client=LocalHub(hub, faults),
            retry=RetryPolicy(attempts=5, base_delay=1.0),
            workers=1,
            progress=False,
        )
    message = str(error.value)
    assert (
        f"hf://datasets/{REPO}@main/videos/observation.images.top/chunk-000/file-001.mp4: missing"
        in message
    )
    assert "(video of episode 2, camera observation.images.top)" in message and "404" in message
    assert time.monotonic() - started < 30  # no retry waits (1 s, 2 s, ...) were taken
    assert faults.attempts("videos/observation.images.top/chunk-000/file-001.mp4") == 1
    assert not (tmp_path / "out").exists()


def test_hub_denied_access_fails_fast_with_a_hint(dataset, tmp_path):
    _, _, hub = dataset
    faults = Faults(str(tmp_path / "faults"), permanent="data/*", permanent_status=403)
    with pytest.raises(
        JaxloadError, match=r"data/chunk-000/file-000\.parquet: access denied .*HF_TOKEN"
    ):
        convert(
            REPO,
            tmp_path / "out",
            hub_client=LocalHub(hub, faults),
            retry=RetryPolicy(attempts=5, base_delay=1.0),
            workers=1,
            progress=False,
        )
    assert faults.attempts("data/chunk-000/file-000.parquet") == 1


def test_hub_transient_faults_that_outlast_the_retries(dataset, tmp_path):
    _, _, hub = dataset
    faults = Faults(str(tmp_path / "faults"), transient=10, pattern="data/*")
    with pytest.raises(
        JaxloadError, match=r"@main/data/chunk-000/file-000\.parquet: giving up after 3 attempts"
    ):
        convert(
            REPO,
            tmp_path / "out",
            hub_client=LocalHub(hub, faults),
            retry=RetryPolicy(attempts=3, **FAST),
            workers=1,
            progress=False,
        )
    assert faults.attempts("data/chunk-000/file-000.parquet") == 3
    assert not list(tmp_path.glob(".out*")) and not (tmp_path / "out").exists()


def test_hub_corrupt_parquet_fails_fast(dataset, tmp_path):
    src, _, _ = dataset
    hub = tmp_path / "hub"
    shutil.copytree(src, hub / REPO)
    (hub / REPO / "data/chunk-000/file-001.parquet").write_bytes(b"PAR1 not really")
    faults = Faults(str(tmp_path / "faults"))
    with pytest.raises(
        JaxloadError,
        match=rf"hf://datasets/{REPO}@main/data/chunk-000/file-001\.parquet: unreadable parquet",
    ):
        convert(REPO, tmp_path / "out", hub_client=LocalHub(hub, faults), workers=1, progress=False)
    assert faults.attempts("data/chunk-000/file-001.parquet") == 1


def test_unknown_hub_dataset(dataset, tmp_path):
    with pytest.raises(
        JaxloadError,
        match=r"org/nope: no such local directory, and no Hugging Face dataset 'org/nope'",
    ):
        convert("org/nope", tmp_path / "out", hub_client=LocalHub(dataset[2]), progress=False)


@pytest.mark.processes
def test_unreachable_hub_fails_at_once_saying_what_src_was_tried_as(tmp_path):
    """The real huggingface_hub, pointed at a closed port on loopback (never a real host).
    The first hub request decides whether SRC is a hub dataset at all: a refused connection
    there fails at once (no backoff), naming both the missing directory and the hub."""
    env = os.environ | {
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    env.pop("HF_HUB_OFFLINE", None)
    started = time.monotonic()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxload.cli",
            "convert",
            "lerobot/pusht",
            str(tmp_path / "out"),
            "--retries",
            "3",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert run.returncode == 1, run.stderr
    assert (
        "lerobot/pusht: no such local directory, and cannot reach the Hugging Face Hub at "
        "http://127.0.0.1:9" in run.stderr
    )
    assert "retry" not in run.stderr and "Traceback" not in run.stderr
    assert elapsed < 30, elapsed  # no backoff: interpreter start-up and one refused connect
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.partial").exists()


@pytest.mark.processes
def test_fsspec_url_with_faulty_reads_in_two_workers(dataset, tmp_path):
    src, local, _ = dataset
    faults = Faults(str(tmp_path / "faults"), transient=1)
    report = convert(
        f"file://{src}",
        tmp_path / "out",
        filesystem=FaultyFileSystem(faults=faults),
        retry=RetryPolicy(attempts=3, **FAST),
        workers=2,
        progress=False,
    )
    assert report.retries == faults.total_failures() > 0
    _same_content(tmp_path / "out", local)  # byte for byte, info.json included


def test_fsspec_permission_denied_fails_fast(dataset, tmp_path):
    src, _, _ = dataset
    faults = Faults(str(tmp_path / "faults"), permanent="*.mp4")
    with pytest.raises(JaxloadError, match=r"file-000\.mp4: access denied"):
        convert(
            f"file://{src}",
            tmp_path / "out",
            filesystem=FaultyFileSystem(faults=faults),
            retry=RetryPolicy(attempts=4, base_delay=1.0),
            workers=1,
            progress=False,
        )


def test_missing_fsspec_dataset(tmp_path):
    with pytest.raises(
        JaxloadError, match=r"meta/info\.json: missing; .* is not a LeRobot dataset"
    ):
        convert(f"file://{tmp_path}/nothing", tmp_path / "out", progress=False)


def _response(status):
    return httpx2.Response(status, request=httpx2.Request("GET", "https://h/x"))


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (HfHubHTTPError("503", response=_response(503)), remote.TRANSIENT),
        (HfHubHTTPError("502", response=_response(502)), remote.TRANSIENT),
        (HfHubHTTPError("429", response=_response(429)), remote.TRANSIENT),
        (HfHubHTTPError("408", response=_response(408)), remote.TRANSIENT),
        (HfHubHTTPError("404", response=_response(404)), remote.MISSING),
        (HfHubHTTPError("401", response=_response(401)), remote.AUTH),
        (HfHubHTTPError("403", response=_response(403)), remote.AUTH),
        (HfHubHTTPError("400", response=_response(400)), remote.PERMANENT),
        (httpx2.ConnectError("refused"), remote.TRANSIENT),
        (httpx2.ReadTimeout("slow"), remote.TRANSIENT),
        (requests.exceptions.ConnectionError("reset"), remote.TRANSIENT),
        (requests.exceptions.ReadTimeout("slow"), remote.TRANSIENT),
        (TimeoutError("slow"), remote.TRANSIENT),
        (ConnectionResetError(104, "reset"), remote.TRANSIENT),
        (OfflineModeIsEnabled("offline"), remote.PERMANENT),
        (FileNotFoundError(2, "gone"), remote.MISSING),
        (PermissionError(13, "denied"), remote.AUTH),
        (ValueError("corrupt"), remote.PERMANENT),
    ],
)
def test_error_classification(error, kind):
    assert remote.classify(error) == kind


def test_no_credentials_is_said_with_where_to_put_them():
    botocore = pytest.importorskip("botocore.exceptions")

    def fail():
        raise botocore.NoCredentialsError()

    with pytest.raises(remote.RemoteError) as caught:
        remote.call_with_retries(fail, what="s3://b/ds/meta/info.json", policy=remote.RetryPolicy())
    assert caught.value.kind == remote.AUTH
    assert "no credentials found" in str(caught.value) and "AWS_ACCESS_KEY_ID" in str(caught.value)


def test_hub_wrapper_of_a_refused_connection_is_transient():
    """hf_hub_download raises LocalEntryNotFoundError (a FileNotFoundError) from a
    connection error when it cannot reach the hub: the cause decides."""
    try:
        try:
            raise httpx2.ConnectError("[Errno 111] Connection refused")
        except httpx2.ConnectError as cause:
            raise LocalEntryNotFoundError("cannot find the requested files") from cause
    except LocalEntryNotFoundError as e:
        assert remote.classify(e) == remote.TRANSIENT
    assert remote.classify(LocalEntryNotFoundError("not cached, offline")) == remote.MISSING


def test_backoff_is_capped_exponential_with_deterministic_jitter():
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0, jitter=0.5)
    delays = [policy.delay(k, "hf://x") for k in range(8)]
    for k, d in enumerate(delays):
        cap = min(4.0, 0.5 * 2**k)
        assert cap / 2 <= d <= cap
    assert delays == [policy.delay(k, "hf://x") for k in range(8)]
    assert delays != [policy.delay(k, "hf://y") for k in range(8)]


def test_an_unknown_storage_option_is_said_to_be_one():
    def fail():  # what aiobotocore raises at the first request for storage_options endpoint=
        raise TypeError("AioSession.__init__() got an unexpected keyword argument 'endpoint'")

    with pytest.raises(remote.RemoteError, match="storage_options name the filesystem does not"):
        remote.call_with_retries(fail, what="s3://b/ds/meta/info.json", policy=remote.RetryPolicy())
