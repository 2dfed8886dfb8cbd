"""jaxload: LeRobot datasets as deterministic, resumable Grain pipelines for JAX.

    import jaxload

    ds = jaxload.open("out/demo", delta_timestamps={"action": [k / 30 for k in range(16)]})
    sample = ds[0]

    loader = jaxload.make_loader("out/demo", global_batch_size=64, sharding=sharding)
    batch = next(loader)                 # global jax.Arrays
    state = loader.get_state()           # or save with Orbax: jaxload.LoaderSave(loader)

Heavier pieces import lazily (the loader pulls in Grain and JAX on first use).
"""

from typing import Any

from jaxload.dataset import JaxloadDataset, open
from jaxload.errors import (
    CheckpointError,
    DatasetError,
    JaxloadError,
    SourceError,
    WindowError,
)

__version__ = "0.1.0"

_LAZY = {
    "make_loader": "jaxload.pipeline.loader",
    "Loader": "jaxload.pipeline.loader",
    "LoaderSave": "jaxload.checkpoint",
    "LoaderRestore": "jaxload.checkpoint",
    "Normalize": "jaxload.transforms",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jaxload' has no attribute {name!r}")


__all__ = [
    "CheckpointError",
    "DatasetError",
    "JaxloadDataset",
    "JaxloadError",
    "Loader",
    "LoaderRestore",
    "LoaderSave",
    "Normalize",
    "SourceError",
    "WindowError",
    "make_loader",
    "open",
]
