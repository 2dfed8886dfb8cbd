"""How a remote dataset is read (jaxload.storage.options.RemoteOptions): built from itself,
None or a dict of its fields; anything else named."""

from __future__ import annotations

import pickle

import pytest

from jaxload.storage.options import RemoteOptions
from jaxload.storage.retry import RetryPolicy


def test_options_are_themselves_the_defaults_or_a_dict_of_fields():
    options = RemoteOptions(cache_bytes=1 << 20)
    assert RemoteOptions.of(options) is options
    assert RemoteOptions.of(None) == RemoteOptions()
    built = RemoteOptions.of({"cache_bytes": 1 << 20, "concurrency": 4})
    assert (built.cache_bytes, built.concurrency) == (1 << 20, 4)
    assert built.max_request_bytes == RemoteOptions().max_request_bytes
    assert pickle.loads(pickle.dumps(built)) == built  # workers get them


def test_the_default_retry_policy_is_not_shared_between_instances():
    a, b = RemoteOptions(), RemoteOptions()
    assert isinstance(a.retry, RetryPolicy) and a.retry == b.retry and a.retry is not b.retry
    assert a.retry.attempts == 5


def test_unknown_fields_and_other_types_are_named():
    with pytest.raises(TypeError, match=r"unknown RemoteOptions field\(s\) cache, speed; the "
                       r"fields are cache_bytes, cache_dir, coalesce_bytes"):  # fmt: skip
        RemoteOptions.of({"cache": 1, "speed": 2, "concurrency": 3})
    with pytest.raises(TypeError, match=r"remote= takes RemoteOptions or a dict .*, not 5"):
        RemoteOptions.of(5)
