"""converters/sources.py: from the SRC a user types to the files and the reader: a local
directory, an fsspec URL, or a hub id (a local directory standing in for the hub,
tests/support/remote_fakes.LocalHub); one message when SRC is none of them."""

from __future__ import annotations

import json
import shutil

import pytest

from jaxload.converters.files import FsspecFiles, LocalFiles
from jaxload.converters.hub import HubFiles
from jaxload.converters.lerobot_common import load_info
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.converters.lerobot_v21 import LeRobotV21Source
from jaxload.converters.sources import open_files, open_source, reader_for
from jaxload.errors import JaxloadError, SourceError
from jaxload.storage.retry import RetryPolicy
from tests.support.remote_fakes import SHA, LocalHub


def test_the_forms_of_src(small_v3, tmp_path):
    assert isinstance(open_files(small_v3), LocalFiles)
    url = open_files(f"file://{small_v3}", cache_dir=tmp_path)
    assert isinstance(url, FsspecFiles) and url.exists("meta/info.json")
    hub_root = tmp_path / "hub"
    shutil.copytree(small_v3, hub_root / "team" / "demo")
    files = open_files("team/demo", cache_dir=tmp_path / "c", hub_client=LocalHub(hub_root))
    assert isinstance(files, HubFiles) and files.sha == SHA  # resolved here, once
    assert isinstance(open_source(files), LeRobotV3Source)


def test_a_revision_is_for_hub_ids_only(small_v3):
    for src in (str(small_v3), f"file://{small_v3}"):
        with pytest.raises(JaxloadError, match="only a hub dataset id takes a revision"):
            open_files(src, revision="v1")


def test_neither_a_directory_nor_a_hub_id_is_one_message(small_v3, tmp_path):
    (tmp_path / "pusht_v3").mkdir()
    with pytest.raises(
        SourceError,
        match=r"no such local directory \(and not a Hugging Face dataset id either.*did you mean .*pusht_v3\?",
    ):
        open_files(str(tmp_path / "pusht-v3"))
    hub = LocalHub(tmp_path / "empty-hub")
    policy = RetryPolicy(attempts=1)
    with pytest.raises(
        SourceError,
        match=r"^team/nothing: no such local directory, and no Hugging Face dataset 'team/nothing' \(asked local-hub",
    ):
        open_files("team/nothing", hub_client=hub, policy=policy)


def test_reader_for_each_codebase_version(small_v3, tmp_path):
    files = LocalFiles(small_v3)
    assert reader_for(files, {"codebase_version": "v3.0"}) is LeRobotV3Source
    assert reader_for(files, {"codebase_version": "v2.1"}) is LeRobotV21Source
    assert reader_for(files, {"codebase_version": "v2.0"}) is LeRobotV21Source
    assert reader_for(files, load_info(files)) is LeRobotV3Source
    with pytest.raises(
        SourceError,
        match=r"meta/info\.json: codebase_version 'v1\.6' is not supported \(supported: v2\.0, v2\.1, v3\.0\)",
    ):
        reader_for(files, {"codebase_version": "v1.6"})
    copy = shutil.copytree(small_v3, tmp_path / "src")
    info = json.loads((copy / "meta/info.json").read_text())
    (copy / "meta/info.json").write_text(json.dumps({**info, "codebase_version": None}))
    with pytest.raises(SourceError, match="codebase_version None is not supported"):
        open_source(LocalFiles(copy))
