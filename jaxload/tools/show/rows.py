"""What a contact sheet shows, taken from a batch: per sample, its cameras' windows (with
padded slots and missing cameras), its vector windows (action, state; padded steps and
dims), and who it is (dataset, episode, frame, task, `dataset_index`).

A batch is host numpy or global `jax.Array`s: each array comes to the host as this
process's rows (`host_rows`), so a multi-host batch never needs a collective.

How the loader marks what is not there (docs/LOADER.md, "One batch schema"):

* a padded slot of a windowed camera: `{key}_is_pad[row, t]` True; its pixels are the
  clamped copy of the episode's edge frame (LeRobot's semantics);
* a camera a dataset does not have (`DatasetSource(cameras={key: None})`, or a key only
  other datasets have): zeros with `{key}_is_pad` True on every slot of its rows (a `(B,)`
  bool for an unwindowed camera). All slots padded *and* all pixels zero is "missing": a
  real camera's padded slots are copies of real frames;
* vector sizes that differ: zero-padded at the end, `{key}_dim_is_pad[row, d]` True.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.episode_dataset import EpisodeDataset

# Keys of every sample that are who it is, not what it shows.
ID_KEYS = ("dataset_index", "episode_index", "frame_index", "index", "task_index", "timestamp")


@dataclasses.dataclass(frozen=True)
class CameraWindow:
    """One camera of one sample: `frames` (T, H, W, C) uint8, `is_pad` (T,), `missing`, and
    each slot's offset in frames from the sample's frame where its dataset says (else None)."""

    key: str
    frames: np.ndarray
    is_pad: np.ndarray
    missing: bool
    offsets: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class SeriesWindow:
    """One vector key of one sample: `values` (T, D) as served, `step_is_pad` (T,),
    `dim_is_pad` (D,), and `scale`: the dataset's own stats for it, in words (or "")."""

    key: str
    values: np.ndarray
    step_is_pad: np.ndarray
    dim_is_pad: np.ndarray
    scale: str


@dataclasses.dataclass(frozen=True)
class SampleRow:
    """One row of the sheet."""

    cameras: tuple[CameraWindow, ...]
    series: tuple[SeriesWindow, ...]
    dataset_index: int
    dataset: str  # the dataset's name (its path), or "" when only the batch is known
    episode: int | None
    frame: int | None
    task: str
    fps: float | None
    position: int | None  # the row's global position in the loader's stream, if known


@dataclasses.dataclass(frozen=True)
class Context:
    """What a loader knows beyond its batch (all optional: a bare batch has none of it)."""

    names: Sequence[str] = ()
    datasets: Sequence[EpisodeDataset] = ()
    positions: Sequence[int] = ()  # each row's global position in the loader's stream


def host_rows(value: Any) -> np.ndarray:
    """`value` as a numpy array of this process's rows: a global `jax.Array` not fully
    addressable gives the rows of its addressable shards (sorted, replicas once)."""
    if isinstance(value, np.ndarray):
        return value
    if getattr(value, "is_fully_addressable", True) or not hasattr(value, "addressable_shards"):
        return np.asarray(value)
    parts: dict[int, np.ndarray] = {}
    for shard in value.addressable_shards:
        start = (shard.index[0].start or 0) if shard.index else 0
        parts.setdefault(start, np.asarray(shard.data))
    return np.concatenate([parts[s] for s in sorted(parts)])


def camera_keys(batch: Mapping[str, np.ndarray]) -> list[str]:
    """Keys holding images: (B, H, W, C) or (B, T, H, W, C) with C in 1, 3, 4."""
    out = []
    for key, value in batch.items():
        if key.endswith("_is_pad") or value.dtype.kind not in "uif":
            continue
        if value.ndim in (4, 5) and value.shape[-1] in (1, 3, 4) and value.shape[-2] > 4:
            out.append(key)
    return out


def series_keys(batch: Mapping[str, np.ndarray], cameras: Sequence[str]) -> list[str]:
    """Vector keys worth a line plot: float (B, D) or (B, T, D), action first, then state."""
    out = [
        key
        for key, value in batch.items()
        if key not in cameras
        and not key.endswith("_is_pad")
        and key not in ID_KEYS
        and value.dtype.kind == "f"
        and value.ndim in (2, 3)
    ]
    order = {"action": 0, "observation.state": 1}
    return sorted(out, key=lambda k: (order.get(k, 2), k))


def sample_rows(
    batch: Mapping[str, Any], context: Context, samples: int | None = None
) -> list[SampleRow]:
    """The first `samples` rows of `batch` (all by default) as `SampleRow`s."""
    arrays = {k: v if isinstance(v, np.ndarray) else host_rows(v) for k, v in batch.items()}
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    if not arrays:
        raise ValueError("the batch is empty: nothing to show")
    size = len(next(iter(arrays.values())))
    count = size if samples is None else min(samples, size)
    if count < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    cameras = camera_keys(arrays)
    series = series_keys(arrays, cameras)
    return [_row(arrays, r, cameras, series, context) for r in range(count)]


def _row(
    arrays: Mapping[str, np.ndarray],
    r: int,
    cameras: Sequence[str],
    series: Sequence[str],
    context: Context,
) -> SampleRow:
    d = int(arrays["dataset_index"][r]) if "dataset_index" in arrays else 0
    dataset = context.datasets[d] if d < len(context.datasets) else None
    return SampleRow(
        cameras=tuple(_camera(arrays, key, r, dataset) for key in cameras),
        series=tuple(_series(arrays, key, r, dataset) for key in series),
        dataset_index=d,
        dataset=str(context.names[d]) if d < len(context.names) else "",
        episode=_int(arrays, "episode_index", r),
        frame=_int(arrays, "frame_index", r),
        task=_task(arrays, r, dataset),
        fps=dataset.fps if dataset is not None else None,
        position=int(context.positions[r]) if r < len(context.positions) else None,
    )


def _int(arrays: Mapping[str, np.ndarray], key: str, r: int) -> int | None:
    return int(arrays[key][r]) if key in arrays else None


def _task(arrays: Mapping[str, np.ndarray], r: int, dataset: EpisodeDataset | None) -> str:
    if "task" in arrays:
        return str(arrays["task"][r])
    tasks = dataset.tasks if dataset is not None else {}
    if "task_index" in arrays and tasks:
        return str(tasks.get(int(arrays["task_index"][r]), ""))
    return ""


def _camera(
    arrays: Mapping[str, np.ndarray], key: str, r: int, dataset: EpisodeDataset | None
) -> CameraWindow:
    frames = arrays[key][r]
    if frames.ndim == 3:
        frames = frames[None]
    frames = _uint8(frames)
    pad = arrays.get(f"{key}_is_pad")
    is_pad = np.zeros(len(frames), bool) if pad is None else np.asarray(pad[r], bool)
    is_pad = np.broadcast_to(is_pad, (len(frames),)).copy()
    missing = bool(is_pad.all()) and not frames.any()
    return CameraWindow(key, frames, is_pad, missing, _offsets(dataset, key, len(frames)))


def _offsets(dataset: EpisodeDataset | None, key: str, slots: int) -> tuple[int, ...] | None:
    """The window's offsets in frames, from the dataset's `window_frames` (in its own key
    names: a camera renamed by `cameras=` has none here)."""
    windows = dataset.window_frames if dataset is not None else {}
    offsets = windows.get(key)
    if offsets is None or len(offsets) != slots:
        return None
    return tuple(int(t) for t in offsets)


def _uint8(frames: np.ndarray) -> np.ndarray:
    """Frames as uint8 for drawing: floats are read as [0, 1] (ImageTransforms'
    dtype="float32"), or min-max scaled where they leave that range (normalized)."""
    if frames.dtype == np.uint8:
        return frames
    x = frames.astype(np.float32)
    lo, hi = float(x.min(initial=0.0)), float(x.max(initial=0.0))
    if lo < 0.0 or hi > 1.0:
        x = (x - lo) / (hi - lo or 1.0)
    return np.clip(np.round(x * 255), 0, 255).astype(np.uint8)


def _series(
    arrays: Mapping[str, np.ndarray], key: str, r: int, dataset: EpisodeDataset | None
) -> SeriesWindow:
    values = np.asarray(arrays[key][r], np.float64)
    if values.ndim == 1:
        values = values[None]
    steps, dims = values.shape
    pad = arrays.get(f"{key}_is_pad")
    step_is_pad = np.zeros(steps, bool)
    if pad is not None:
        step_is_pad = np.broadcast_to(np.asarray(pad[r], bool), (steps,)).copy()
    dim_pad = arrays.get(f"{key}_dim_is_pad")
    dim_is_pad = np.zeros(dims, bool) if dim_pad is None else np.asarray(dim_pad[r], bool)
    return SeriesWindow(key, values, step_is_pad, dim_is_pad, _scale(dataset, key))


def _scale(dataset: EpisodeDataset | None, key: str) -> str:
    """The dataset's own range for `key` from its meta/stats.json (min and max over its
    dims), e.g. "dataset's stats: -1.2 .. 3.4", or "" without stats."""
    if dataset is None:  # a batch alone: its rows carry no dataset
        return "(dataset stats: pass the loader, not a batch)"
    try:
        stats = dataset.stats[key]
    except (KeyError, AttributeError, TypeError, ValueError):
        stats = None
    if not stats or "min" not in stats or "max" not in stats:
        return ""
    lo, hi = float(np.min(stats["min"])), float(np.max(stats["max"]))
    return f"dataset's stats: {lo:.3g} .. {hi:.3g}"
