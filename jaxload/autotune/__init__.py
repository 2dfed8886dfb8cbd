"""Autotune: make_loader settings from measurements of this machine and the dataset
(`jaxload autotune PATH`, or `make_loader(..., options=PipelineOptions(autotune=True))`).

- `probe`: what a dataset costs here (record sizes, decode and sample times);
- `recommend`: `Recommendation` and the rules that turn the measurements, with the
  machine's (`jaxload.placement.machine`), into settings, each with its reason.

Example::

    rec = recommend("out/pusht", delta_timestamps={"action": [k / 10 for k in range(16)]})
    print(rec.summary())                      # what was measured and why
    loader = jaxload.make_loader("out/pusht", global_batch_size=rec.global_batch_size,
                                 **rec.loader_kwargs())
"""

from jaxload.autotune.probe import CameraProbe, DatasetProbe, probe_dataset
from jaxload.autotune.recommend import Recommendation, recommend, tuned_loader_kwargs

__all__ = [
    "CameraProbe",
    "DatasetProbe",
    "Recommendation",
    "probe_dataset",
    "recommend",
    "tuned_loader_kwargs",
]
