"""The PATH of `jaxload info`, `stats` and `doctor` (jaxload.tools.dataset_path): the
`--storage-option KEY=VALUE` flag, storage options refused for a local path, and what a
path or URL holds judged by its meta/info.json, every failure naming the URL.

URLs are served over HTTP from a folder by a server thread in this process (the network
is what cannot exist here; fsspec's HTTP filesystem reads it as it reads any server)."""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import threading

import pytest

from jaxload.errors import DatasetError, JaxloadError
from jaxload.format import layout
from jaxload.format.storage import DatasetStorage
from jaxload.tools import dataset_path as P

JAXLOAD_INFO = {"format": layout.FORMAT_NAME, "fps": 10}
LEROBOT_INFO = {"codebase_version": "v3.0", "fps": 10}


def _dataset(root, info) -> str:
    (root / "meta").mkdir(parents=True)
    text = info if isinstance(info, str) else json.dumps(info)
    (root / layout.INFO_PATH).write_text(text)
    return str(root)


@pytest.fixture
def served(tmp_path):
    """A URL serving `tmp_path` over HTTP, from a thread of this process."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(
    ("pair", "parsed"),
    [("endpoint_url=http://localhost:9000", ("endpoint_url", "http://localhost:9000")),
     ("anon=false", ("anon", False)), ("retries=3", ("retries", 3)),
     ('client_kwargs={"region_name": "eu"}', ("client_kwargs", {"region_name": "eu"})),
     ("token=", ("token", "")), ("a=b=c", ("a", "b=c"))],
)  # fmt: skip
def test_a_storage_option_is_a_key_and_a_json_value_or_a_string(pair, parsed):
    assert P.storage_option(pair) == parsed


def test_the_flag_repeats_and_refuses_a_malformed_pair(capsys):
    parser = argparse.ArgumentParser(prog="jaxload info")
    P.add_storage_option(parser, "for a URL")
    args = parser.parse_args(["--storage-option", "anon=true", "--storage-option", "b=x"])
    assert P.storage_options_of(args) == {"anon": True, "b": "x"}
    assert P.storage_options_of(parser.parse_args([])) is None
    for bad in ("novalue", "=x"):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(["--storage-option", bad])
        assert exited.value.code == 2
        assert f"--storage-option: '{bad}': expected KEY=VALUE" in capsys.readouterr().err
        with pytest.raises(argparse.ArgumentTypeError, match="expected KEY=VALUE"):
            P.storage_option(bad)


def test_storage_options_are_refused_for_a_local_path(tmp_path):
    with pytest.raises(JaxloadError, match=rf"{tmp_path}: --storage-option applies only to a URL"):
        P.refuse_options_for_local(str(tmp_path), {"anon": True})
    with pytest.raises(JaxloadError, match="applies only to a URL"):
        P.locate(tmp_path, {"anon": True})
    P.refuse_options_for_local(str(tmp_path), None)
    P.refuse_options_for_local("s3://bucket/ds", {"anon": True})


def test_a_local_folder_is_jaxloads_by_its_info_json_else_lerobots(tmp_path):
    assert P.dataset_kind(_dataset(tmp_path / "ours", JAXLOAD_INFO)) == P.JAXLOAD
    assert P.dataset_kind(_dataset(tmp_path / "theirs", LEROBOT_INFO)) == P.LEROBOT
    assert P.dataset_kind(_dataset(tmp_path / "broken", "{not json")) == P.LEROBOT
    assert P.dataset_kind(tmp_path / "nothing") == P.LEROBOT  # the LeRobot reader says why
    assert P.dataset_kind("lerobot/pusht") == P.LEROBOT  # a hub id


def test_a_url_is_judged_by_its_info_json(tmp_path, served):
    _dataset(tmp_path / "ours", JAXLOAD_INFO)
    _dataset(tmp_path / "theirs", LEROBOT_INFO)
    assert P.dataset_kind(f"{served}/ours") == P.JAXLOAD
    assert P.dataset_kind(f"{served}/theirs/") == P.LEROBOT
    assert P.manifest(f"{served}/ours/", None) == JAXLOAD_INFO
    where = P.locate(f"{served}/ours/", {"block_size": 0})
    assert (where.path, where.url) == (f"{served}/ours/", f"{served}/ours")
    assert where.storage_options == {"block_size": 0}
    assert isinstance(where.storage, DatasetStorage)  # read where it lives, over HTTP
    assert where.storage.where(layout.INFO_PATH) == f"{served}/ours/{layout.INFO_PATH}"
    assert json.loads(where.storage.read(layout.INFO_PATH)) == JAXLOAD_INFO


def test_a_url_without_a_datasets_info_json_is_an_error_naming_it(tmp_path, served):
    _dataset(tmp_path / "garbled", "{not json")
    _dataset(tmp_path / "other", {"name": "a model card"})
    with pytest.raises(JaxloadError, match=rf"no jaxload or LeRobot dataset at {served}/gone; "):
        P.dataset_kind(f"{served}/gone/")
    with pytest.raises(DatasetError, match=rf"{served}/garbled/meta/info.json: not valid JSON"):
        P.manifest(f"{served}/garbled", None)
    with pytest.raises(DatasetError, match=r"other/meta/info.json: neither a jaxload nor a Le"):
        P.locate(f"{served}/other")


def test_a_local_dataset_is_read_where_it_is_and_its_bytes_counted(tmp_path):
    root = _dataset(tmp_path / "ours", JAXLOAD_INFO)
    (tmp_path / "ours" / "data").mkdir()
    (tmp_path / "ours" / "data" / "shard.bin").write_bytes(b"x" * 1000)
    where = P.locate(root)
    assert (where.path, where.url, where.storage_options) == (root, None, None)
    assert where.storage.where(layout.INFO_PATH) == f"{root}/{layout.INFO_PATH}"
    info_bytes = len((tmp_path / "ours" / layout.INFO_PATH).read_bytes())
    assert where.total_bytes() == 1000 + info_bytes
