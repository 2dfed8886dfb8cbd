"""Normalization statistics of tabular features, streamed from a converted dataset, in
LeRobot's `meta/stats.json` structure (count, mean, std, min, max, q01..q99 per feature);
image stats are copied per channel from the source, video is never decoded.

    >>> import jaxload.stats as stats
    >>> per_key = stats.load_stats("out/demo")      # written by `jaxload convert`
    >>> per_key["action"].count, per_key["action"].mean.shape
    (20, (4,))
    >>> mixture = stats.merge_stats([per_key, stats.load_stats("out/demo")])
    >>> mixture["action"].count                     # count-weighted, without the data
    40

One concern per module (docs/METADATA.md has the method and the proofs):

- `feature_stats`: `FeatureStats` (one feature's stats, stats.json entries) and `Grid`;
- `moments`: exact streaming mean/std/min/max, mergeable (Chan, Golub & LeVeque);
- `quantiles`: exact quantiles by streaming selection, memory independent of the frames;
- `sketch`: the quantile-shaped histograms kept for merging, and `merge_stats`;
- `stream`: `compute_stats` over datasets, `stream_stats` over any re-readable data;
- `store`: `write_stats` / `load_stats` (meta/stats.json and meta/stats_sketch.npz);
- `speed`: per-task speed buckets of episode lengths (`jaxload.stats.speed`).
"""

from jaxload.stats.feature_stats import QUANTILES, STAT_ORDER, FeatureStats, Grid
from jaxload.stats.moments import Moments
from jaxload.stats.sketch import merge_stats
from jaxload.stats.store import SKETCH_PATH, load_stats, stats_to_json, write_stats
from jaxload.stats.stream import compute_stats, stream_stats

__all__ = [
    "QUANTILES",
    "SKETCH_PATH",
    "STAT_ORDER",
    "FeatureStats",
    "Grid",
    "Moments",
    "compute_stats",
    "load_stats",
    "merge_stats",
    "stats_to_json",
    "stream_stats",
    "write_stats",
]
