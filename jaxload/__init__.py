"""jaxload: LeRobot datasets as deterministic, resumable Grain pipelines for JAX.

    import jaxload

    ds = jaxload.open("out/demo", delta_timestamps={"action": [k / 30 for k in range(16)]})
    sample = ds[0]

    loader = jaxload.make_loader("out/demo", global_batch_size=64, sharding=sharding)
    batch = next(loader)                 # global jax.Arrays
    state = loader.get_state()           # or save with Orbax: jaxload.LoaderSave(loader)

Package layout (one concern per home):

    format/     the on-disk format and its one reader
    decode/     compressed frames and the decode backend (torchcodec, CPU or CUDA)
    dataset.py  jaxload.open: map-style dataset over frames, with windows
    metadata.py ds.meta: a dataset's metadata under LeRobotDatasetMetadata's names
    sampling/   epoch permutations, mixtures, the global sample stream
    episode_dataset.py  EpisodeDataset: what a loader needs of a dataset (MapDataset wraps others)
    sources/    what a loader reads: DatasetSource, windows in frames at each fps
    batch/      what a batch holds (schema, keys) and which rows this host takes
    placement/  where video is decoded and image transforms run (decided once)
    options.py  PipelineOptions: how the pipeline runs
    resolution/ make_loader: arguments resolved in phases into one LoaderSpec
    stages/     per batch: the read stage and the Grain pipeline
    workers/    worker processes, shared-memory batches, read threads
    pipeline/   the Loader: iteration and state
    state.py, checkpoint.py   loader state and its Orbax handler
    stats/      normalization statistics and speed buckets
    transforms/ image transforms keyed by (seed, position), on CPU or devices; Normalize
    storage/    datasets at URLs (s3://, gs://, hf://): byte-range reads, cache, prefetch
    converters/ jaxload convert (LeRobot v2.1/v3.0 -> jaxload)
    autotune/   loader settings from measurements of this machine and the dataset
    tools/      benchmarks, eval sharding, doctor, show (never imported by a trainer)

Heavier pieces import lazily (the loader pulls in Grain and JAX on first use).
"""

from typing import Any

from jaxload.dataset import JaxloadDataset, open
from jaxload.errors import (
    CheckpointError,
    DatasetError,
    JaxloadError,
    RemoteError,
    SourceError,
    WindowError,
)
from jaxload.metadata import DatasetMetadata

__version__ = "0.1.0"

_LAZY = {
    "make_loader": "jaxload.pipeline.make_loader",
    "Loader": "jaxload.pipeline.loader",
    "LoaderSpec": "jaxload.resolution.spec",
    "DatasetSource": "jaxload.sources.source",
    "MixtureWeights": "jaxload.sampling.weights",
    "PipelineOptions": "jaxload.options",
    "LoaderSave": "jaxload.checkpoint",
    "LoaderRestore": "jaxload.checkpoint",
    "Normalize": "jaxload.transforms",
    "ImageTransforms": "jaxload.transforms",
    "RemoteOptions": "jaxload.storage.options",
    "show": "jaxload.tools.show",  # a contact sheet of a batch (Pillow); tooling, so lazy
}
_SUBMODULES = ("stats", "transforms")


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"jaxload.{name}")
    raise AttributeError(f"module 'jaxload' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too, so tab completion and dir() find `jaxload.stats`."""
    return sorted({*globals(), *_LAZY, *_SUBMODULES})


__all__ = [
    "CheckpointError",
    "DatasetError",
    "DatasetMetadata",
    "DatasetSource",
    "ImageTransforms",
    "JaxloadDataset",
    "JaxloadError",
    "Loader",
    "LoaderRestore",
    "LoaderSave",
    "LoaderSpec",
    "MixtureWeights",
    "Normalize",
    "PipelineOptions",
    "RemoteError",
    "RemoteOptions",
    "SourceError",
    "WindowError",
    "make_loader",
    "open",
    "show",
    "stats",
    "transforms",
]
