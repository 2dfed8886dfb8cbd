"""A spec factory for tests: what `make_loader` resolves (`jaxload.resolution.resolve`),
without a `Loader`, so that a stage can be built from a spec and tested alone::

    spec, datasets = loader_spec(FakeDataset([5, 7]), global_batch_size=4)
    batch = ReadBatch(spec, datasets, 0).map(0)
"""

from __future__ import annotations

from typing import Any

from jaxload.episode_dataset import OpenedDatasets
from jaxload.options import PipelineOptions
from jaxload.resolution.request import LoaderRequest
from jaxload.resolution.resolve import resolve
from jaxload.resolution.spec import LoaderSpec
from jaxload.storage.options import RemoteOptions


def loader_spec(
    paths_or_datasets: Any,
    *,
    global_batch_size: int = 4,
    options: PipelineOptions | None = None,
    **kwargs: Any,
) -> tuple[LoaderSpec, OpenedDatasets]:
    """(the LoaderSpec, the opened datasets) of make_loader's arguments; one host and no
    worker processes unless `options`/`host_index`/`host_count` say otherwise."""
    kwargs.setdefault("host_index", 0)
    kwargs.setdefault("host_count", 1)
    return resolve(
        LoaderRequest(paths_or_datasets, global_batch_size=global_batch_size, **kwargs),
        options or PipelineOptions(num_workers=0, read_threads=1),
    )


def remote_loader_spec(
    monkeypatch: Any, root: Any, url: str = "s3://local/ds", **kwargs: Any
) -> tuple[LoaderSpec, OpenedDatasets]:
    """`loader_spec` of the dataset converted at `root`, read as the remote `url`: the
    network faked by `serve_locally` (tests/support/remote_fakes.py), everything else
    (object store, record checks, cache, lookahead) real. `remote`: RemoteOptions fields."""
    from tests.support.remote_fakes import serve_locally

    serve_locally(monkeypatch, url, root)
    remote = RemoteOptions(log_every_s=0, **kwargs.pop("remote", {}))
    return loader_spec(url, remote=remote, **kwargs)
