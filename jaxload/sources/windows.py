"""Each source's windows at its own fps: `delta_timestamps` (seconds, LeRobot's) and
`delta_frames` (frames), resolved into integer frame offsets before the dataset opens
(frames stay the integers they are; seconds become frames once, on the dataset's grid).

A mixture's datasets differ in fps: 0.1 s is 3 frames at 30 fps and 2.5 at 25 fps. Three
ways to say what a window means across them:

* `delta_frames={"action": range(16)}`: 16 frames at every dataset's own fps (the same
  number of steps, each dataset's own duration);
* `delta_timestamps={"action": [...]}` in seconds: the same duration, which must lie on
  every dataset's 1/fps grid; a value that does not is a `WindowError` naming the dataset,
  its fps and the nearest valid values;
* `snap_windows=True`: seconds rounded to each dataset's nearest frame.

One dict given to make_loader serves every dataset of a mixture, each taking the keys it
has (a key no dataset has is an error). Windows that mostly fall outside their episodes
(seconds given as frames: `[0, 1, ..., 15]` s at 30 fps) are warned about at make_loader
(`warn_mostly_padded`).

    sources = resolve_windows(sources, shared_seconds, shared_frames, snap=False)
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.episode_dataset import EpisodeDataset, is_dataset
from jaxload.errors import WindowError
from jaxload.windows import DEFAULT_TOLERANCE_S, frames_on_grid, off_grid_message

Windows = Mapping[str, Sequence[float]]
# Warn when more than this share of a window key's slots come back padded.
PADDED_WARNING_SHARE = 0.5


def resolve_windows(
    sources: Sequence[Any],
    shared_seconds: Windows | None,
    shared_frames: Windows | None,
    *,
    snap: bool = False,
    read_info: Any,
) -> list[Any]:
    """`sources` (DatasetSource) with their windows as frames at each dataset's fps
    (`delta_frames`; `delta_timestamps` then None).

    `shared_seconds` / `shared_frames`: one dict for every dataset of a mixture (each takes
    the keys it has). A source's own `delta_timestamps`/`delta_frames` replace the shared
    ones for it (every key must be one of its own). `read_info(source)` reads a source's meta/info.json.
    Sources that need no resolution (no frames, no sharing, no snapping) come back as given:
    their dataset checks its windows when it opens.
    """
    shared = bool(shared_seconds) or bool(shared_frames)
    out = []
    infos = []
    for source in sources:
        needs = shared or snap or source.delta_frames
        if not needs or _is_opened(source):
            if _is_opened(source) and shared:
                raise ValueError(
                    "delta_timestamps apply when jaxload opens a path; pass them to jaxload.open "
                    "for datasets you open yourself (a map-style dataset of your own returns "
                    'its windows itself: docs/LOADER.md, "Your own dataset")'
                )
            out.append(source)
            infos.append(None)
            continue
        info = read_info(source)
        infos.append(info)
        keys = {*info.features, *info.cameras}
        where = f"{source.name} ({info.fps:g} fps)"
        own_seconds = dict(source.delta_timestamps or {})
        own_frames = dict(source.delta_frames or {})
        for key in [*own_seconds, *own_frames]:
            if key not in keys:
                raise WindowError(
                    f"{where}: window key {key!r} is not in this dataset; it has "
                    f"{', '.join(sorted(keys))}"
                )
        both = sorted(set(own_seconds) & set(own_frames))
        if both:
            raise WindowError(
                f"{where}: {both} given both in delta_timestamps and delta_frames; give each "
                "key one window"
            )
        if own_seconds or own_frames:  # a source's own windows replace the shared ones
            seconds, frames = own_seconds, own_frames
        else:
            seconds = {k: v for k, v in (shared_seconds or {}).items() if k in keys}
            frames = {k: v for k, v in (shared_frames or {}).items() if k in keys}
            both = sorted(set(seconds) & set(frames))
            if both:
                raise WindowError(
                    f"{where}: {both} given both in delta_timestamps and delta_frames; give "
                    "each key one window"
                )
        resolved = {
            **{
                k: _seconds_on_grid(k, v, info.fps, snap, where, shared) for k, v in seconds.items()
            },
            **{k: _whole_frames(k, v, where) for k, v in frames.items()},
        }
        out.append(
            dataclasses.replace(source, delta_timestamps=None, delta_frames=resolved or None)
        )
    if shared:
        unknown = [
            k
            for k in [*(shared_seconds or {}), *(shared_frames or {})]
            if not any(k in {*i.features, *i.cameras} for i in infos if i is not None)
        ]
        if unknown:
            names = [s.name for s in sources]
            raise WindowError(
                f"delta_timestamps keys {unknown} are in none of the datasets {names}"
            )
    return out


def _is_opened(source: Any) -> bool:
    return is_dataset(source.path)


def _seconds_on_grid(
    key: str, deltas: Sequence[float], fps: float, snap: bool, where: str, shared: bool
) -> list[float]:
    values = _finite(key, deltas, where, "delta_timestamps")
    frames, bad = frames_on_grid(values, fps, DEFAULT_TOLERANCE_S)
    if bad.any() and not snap:
        hint = (
            " One delta_timestamps dict serves datasets of different fps only where its "
            "values lie on every dataset's grid: give the window in frames "
            f"(delta_frames={{{key!r}: ...}}, counted at each dataset's own fps), one dict per "
            "dataset, or snap_windows=True to round each value to the dataset's nearest frame."
            if shared
            else " Give the window in frames (delta_frames), or snap_windows=True to round "
            "each value to the nearest frame."
        )
        raise WindowError(f"{where}: {off_grid_message(key, values, fps)}.{hint}")
    return [int(f) for f in frames]


def _whole_frames(key: str, frames: Sequence[float], where: str) -> list[int]:
    values = _finite(key, frames, where, "delta_frames")
    whole = np.round(values)
    if np.any(whole != values):
        raise WindowError(
            f"{where}: delta_frames[{key!r}]: {values[whole != values].tolist()} are not whole "
            "frames; delta_frames counts frames (integers), delta_timestamps takes seconds"
        )
    return [int(f) for f in whole]


def _finite(key: str, values: Sequence[float], where: str, name: str) -> np.ndarray:
    try:
        array = np.asarray(list(values), dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise WindowError(f"{where}: {name}[{key!r}] must be a list of numbers") from None
    if array.size == 0:
        raise WindowError(f"{where}: {name}[{key!r}] is empty")
    if not np.isfinite(array).all():
        raise WindowError(
            f"{where}: {name}[{key!r}]: {array[~np.isfinite(array)].tolist()} are not finite"
        )
    return array


def padded_share(
    lengths: np.ndarray, offsets: np.ndarray, drop_first: int = 0, drop_last: int = 0
) -> float:
    """The share of a window's slots, over every anchor, that fall outside the anchor's
    episode (LeRobot pads them): O(episodes x window), nothing per frame.

    >>> padded_share(np.array([10]), np.array([0, 5, 20]))  # 0 + 5 + 10 of 30 slots
    0.5
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    lo = np.full(lengths.shape, drop_first, np.int64)
    hi = lengths - drop_last
    anchors = np.maximum(hi - lo, 0)
    total = int(anchors.sum()) * len(offsets)
    if total == 0:
        return 0.0
    padded = 0
    for o in np.asarray(offsets, dtype=np.int64).tolist():
        if o >= 0:  # anchors a with a + o >= length
            padded += int(np.clip(hi - np.maximum(lo, lengths - o), 0, anchors).sum())
        else:  # anchors a with a + o < 0
            padded += int(np.clip(np.minimum(hi, -o) - lo, 0, anchors).sum())
    return padded / total


def warn_mostly_padded(
    names: Sequence[str],
    datasets: Sequence[EpisodeDataset],
    drop_first: int = 0,
    drop_last: int = 0,
) -> None:
    """A warning per dataset window key whose slots are mostly padding (more than
    PADDED_WARNING_SHARE): usually frames given where seconds were meant."""
    for name, ds in zip(names, datasets, strict=True):
        windows, fps = ds.window_frames, ds.fps
        if not windows or not fps:
            continue
        lengths = np.asarray(ds.episode_lengths)
        for key, offsets in windows.items():
            offsets = np.asarray(offsets, np.int64).reshape(-1)
            deltas = offsets / fps
            share = padded_share(lengths, offsets, drop_first, drop_last)
            if share <= PADDED_WARNING_SHARE:
                continue
            as_frames = ""
            if np.all(deltas == np.round(deltas)) and np.abs(deltas).max() >= 1:
                listed = deltas.astype(np.int64).tolist()
                as_frames = (
                    f" delta_timestamps are seconds: if {_short(listed)} are frames, pass "
                    f"delta_frames={{{key!r}: {_short(listed)}}} (or [k / {fps:g} for k in ...])."
                )
            warnings.warn(
                f"{name} ({fps:g} fps): {share:.0%} of the {key!r} window's slots fall outside "
                f"their episode and come back padded ({key}_is_pad): offsets "
                f"{int(offsets.min())}..{int(offsets.max())} frames, episodes "
                f"{float(lengths.mean()):.0f} frames long on average.{as_frames}",
                UserWarning,
                stacklevel=3,
            )


def _short(values: list[int]) -> str:
    """A list for a message; a long arithmetic run as range(...)."""
    steps = set(np.diff(values).tolist()) if len(values) > 2 else set()
    if len(steps) == 1 and steps != {0}:
        step = steps.pop()
        stop = values[-1] + step
        return f"range({values[0]}, {stop})" if step == 1 else f"range({values[0]}, {stop}, {step})"
    return str(values)
