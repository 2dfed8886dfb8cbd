"""Dataset URLs (jaxload.storage.urls): which paths are remote, the filesystem that reads
them (no request is made: s3fs and fsspec only build their clients), and credentials kept
out of messages."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from jaxload.errors import DatasetError
from jaxload.storage import urls


def test_urls_of_the_schemes_fsspec_reads_are_remote_and_paths_are_not():
    for url in (
        "s3://b/ds",
        "S3://b/ds",
        "gs://b/ds",
        "gcs://b/ds",
        "hf://datasets/o/n",
        "https://h/ds",
    ):
        assert urls.is_url(url), url
    for path in ("out/ds", "/abs/ds", "file:///abs/ds", "memory://ds", Path("s3://b/ds"), None):
        assert not urls.is_url(path), path
    assert urls.join("s3://b/ds/", "meta/info.json") == "s3://b/ds/meta/info.json"


def test_options_for_a_local_read_are_said_to_be_ignored_and_not_for_a_url(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxload.storage"):
        urls.warn_if_unused(["out/ds"], {"anon": True}, None)
        urls.warn_if_unused(["s3://b/ds", "out/ds"], {"anon": True}, {"cache_bytes": 1})
        urls.warn_if_unused(["out/ds"], None, None)
    (record,) = caplog.records
    assert record.getMessage() == (
        "out/ds: storage_options apply to dataset URLs (s3://, gs://, hf://, https://) only; "
        "this local read ignores them"
    )


def test_s3_requests_are_tried_once_by_botocore_and_s3fs_under_jaxloads_retries(monkeypatch):
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    monkeypatch.delenv("AWS_RETRY_MODE", raising=False)
    fs, root = urls.filesystem("s3://bucket/ds/", {"anon": True}, timeout_s=3.0)
    assert root == "bucket/ds" and fs.retries == 1
    config = fs.config_kwargs
    assert config["retries"] == {"max_attempts": 0}
    assert (config["connect_timeout"], config["read_timeout"]) == (3.0, 3.0)
    mine = {"anon": True, "config_kwargs": {"retries": {"max_attempts": 3}, "read_timeout": 9}}
    fs, _ = urls.filesystem("s3://bucket/ds", mine, timeout_s=3.0)
    assert fs.config_kwargs["retries"] == {"max_attempts": 3}  # the user's, kept
    assert fs.config_kwargs["read_timeout"] == 9


def test_credentials_never_ride_in_an_s3_url_and_a_missing_package_is_named(monkeypatch):
    with pytest.raises(DatasetError, match="credentials in a s3:// URL are not read") as e:
        urls.filesystem("s3://AKIAKEY:secret@bucket/ds")
    assert "secret" not in str(e.value)
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # not installed (an import fails)
    with pytest.raises(DatasetError, match=r"gs:// URLs needs gcsfs"):
        urls.filesystem("gs://bucket/ds")


def test_messages_show_no_credentials():
    assert "secret" not in urls.redact("https://user:secret@h/ds?token=secret")
    options = {"key": "AKIA", "secret": "s", "client_kwargs": {"region_name": "eu", "token": "t"}}
    assert urls.redacted_options(options) == {
        "key": "***",
        "secret": "***",
        "client_kwargs": {"region_name": "eu", "token": "***"},
    }
    assert urls.redacted_options(None) is None
