"""converters/hub.py: which SRC can be a hub id, and HubFiles reading a dataset repo at a
commit (a local directory stands in for the hub: tests/support/remote_fakes.LocalHub,
raising huggingface_hub's own errors): one listing, downloads into the cache, a transient
error retried, a missing file named, evicted files gone from the cache."""

from __future__ import annotations

import shutil

import pytest

from jaxload.converters.hub import HubFiles, is_repo_id
from jaxload.errors import SourceError
from jaxload.storage.retry import RemoteError, RetryPolicy
from tests.support.remote_fakes import SHA, Faults, LocalHub, downloads


def test_is_repo_id():
    good = ["lerobot/pusht", "a/b", "A-1/b_2.c", "x/" + "n" * 96]
    bad = ["pusht", "./x", "../x", "/x", "~/x", "a/b/c", "a--b/c", "a/b..c", "a/b.git",
           "-a/b", "a/b-", "x/" + "n" * 97, "a b/c"]  # fmt: skip
    assert [is_repo_id(t) for t in good] == [True] * len(good)
    assert [t for t in bad if is_repo_id(t)] == []


@pytest.fixture
def hub(small_v3, tmp_path):
    shutil.copytree(small_v3, tmp_path / "hub" / "team" / "demo")
    return tmp_path / "hub"


def test_hub_files_read_a_repo_at_its_commit(hub, tmp_path):
    faults = Faults(str(tmp_path / "faults"))
    files = HubFiles("team/demo", cache_dir=tmp_path / "cache", client=LocalHub(hub, faults))
    assert files.describe("meta/info.json") == "hf://datasets/team/demo@main/meta/info.json"
    assert files.identity() == {"kind": "hub", "location": "team/demo", "revision": SHA}
    path = files.local("meta/info.json")
    assert path.read_bytes() == (hub / "team/demo/meta/info.json").read_bytes()
    assert files.local("meta/info.json") == path and downloads(faults) == ["meta/info.json"]
    with pytest.raises(SourceError, match=r"@main/meta/nothing\.json: missing \(x\)"):
        files.local("meta/nothing.json", "x")  # known from the listing: no request
    files.evict("meta/info.json")
    assert not path.exists()
    files.evict("meta/never-downloaded.json")  # nothing cached: nothing to do


def test_transient_errors_are_retried_and_a_missing_repo_fails_at_once(hub, tmp_path):
    faults = Faults(str(tmp_path / "faults"), transient=2, pattern="meta/*")
    sleeps = []
    files = HubFiles("team/demo", revision="v1", cache_dir=tmp_path / "cache",
                     client=LocalHub(hub, faults), policy=RetryPolicy(sleep=sleeps.append))  # fmt: skip
    files.local("meta/info.json")
    assert files.retries == 2 and len(sleeps) == 2
    missing = HubFiles("team/none", client=LocalHub(hub), policy=RetryPolicy(sleep=sleeps.append))
    with pytest.raises(RemoteError) as error:
        missing.resolve()
    assert "hf://datasets/team/none@main" in str(error.value) and len(sleeps) == 2
