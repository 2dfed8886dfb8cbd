"""jaxload: LeRobot datasets as deterministic, resumable Grain pipelines for JAX.

import jaxload
ds = jaxload.open("out/demo", delta_timestamps={"action": [k / 30 for k in range(16)]})
sample = ds[0]
"""

from jaxload.dataset import JaxloadDataset, open
from jaxload.errors import (
    CheckpointError,
    DatasetError,
    JaxloadError,
    SourceError,
    WindowError,
)

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "DatasetError",
    "JaxloadDataset",
    "JaxloadError",
    "SourceError",
    "WindowError",
    "open",
]
