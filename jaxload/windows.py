"""Episode-aware frame windows with LeRobotDataset's exact semantics.

`delta_timestamps` maps a key to offsets in seconds. Each offset must be a multiple of
1/fps (within `tolerance_s`) and becomes the integer frame offset round(delta * fps).
Window frames are clamped into the anchor's episode and the clamped slots are flagged in
`{key}_is_pad`; video keys are clamped the same way as tabular keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from jaxload.errors import WindowError

# LeRobotDataset's default tolerance for timestamps.
DEFAULT_TOLERANCE_S = 1e-4
# The largest window offset in frames (~35 years at 1000 fps): past it, offsets, anchors
# plus offsets and their sums no longer fit int64 (1e18 s at 10 fps wrapped around).
MAX_OFFSET_FRAMES = 2**40


def resolve_delta_timestamps(
    delta_timestamps: Mapping[str, Sequence[float]] | None,
    fps: int,
    valid_keys: Iterable[str],
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> dict[str, np.ndarray]:
    """Turns `delta_timestamps` into integer frame offsets per key (int64 arrays).

    >>> resolve_delta_timestamps({"action": [0.0, 0.1]}, fps=10, valid_keys=["action"])
    {'action': array([0, 1])}
    """
    if not delta_timestamps:
        return {}
    valid = sorted(valid_keys)
    offsets = {}
    for key, deltas in delta_timestamps.items():
        if key not in valid:
            raise WindowError(
                f"delta_timestamps: unknown key {key!r}; this dataset has {', '.join(valid)}"
            )
        deltas = np.asarray(deltas, dtype=np.float64).reshape(-1)
        if deltas.size == 0:
            raise WindowError(f"delta_timestamps[{key!r}] is empty")
        # NaN passes the tolerance test below (every comparison is False) and NaN/inf cast
        # to int64 as a huge offset that clamps to the episode's edge: a silent pad.
        if not np.isfinite(deltas).all():
            raise WindowError(
                f"delta_timestamps[{key!r}]: {deltas[~np.isfinite(deltas)].tolist()} are not "
                "finite; offsets must be finite multiples of 1/fps seconds"
            )
        huge = np.abs(deltas) * fps > MAX_OFFSET_FRAMES
        if huge.any():
            raise WindowError(
                f"delta_timestamps[{key!r}]: {deltas[huge].tolist()} s are more than "
                f"2**40 frames at {fps:g} fps; a window offset is seconds from the anchor "
                "frame, within its episode"
            )
        frames, bad = frames_on_grid(deltas, fps, tolerance_s)
        if bad.any():
            raise WindowError(off_grid_message(key, deltas, fps, tolerance_s))
        offsets[key] = frames
    return offsets


def resolve_windows_in_frames(
    delta_timestamps: Mapping[str, Sequence[float]] | None,
    delta_frames: Mapping[str, Sequence[int]] | None,
    fps: int,
    valid_keys: Iterable[str],
) -> dict[str, np.ndarray]:
    """Integer frame offsets per key from windows in seconds (`resolve_delta_timestamps`)
    and windows already in frames (kept as the integers they are).

    >>> resolve_windows_in_frames({"action": [0.0, 0.1]}, {"state": [-1, 0]}, 10,
    ...                           ["action", "state"])
    {'action': array([0, 1]), 'state': array([-1,  0])}
    """
    offsets = resolve_delta_timestamps(delta_timestamps, fps, valid_keys)
    valid = sorted(valid_keys)
    for key, frames in (delta_frames or {}).items():
        if key not in valid:
            raise WindowError(
                f"delta_frames: unknown key {key!r}; this dataset has {', '.join(valid)}"
            )
        if key in offsets:
            raise WindowError(
                f"{key!r} given both in delta_timestamps and delta_frames; give each key one window"
            )
        values = np.asarray(list(frames)).reshape(-1)
        if values.size == 0:
            raise WindowError(f"delta_frames[{key!r}] is empty")
        if values.dtype.kind not in "iu":
            whole = np.round(values.astype(np.float64))
            if not np.isfinite(whole).all() or np.any(whole != values):
                raise WindowError(
                    f"delta_frames[{key!r}]: {values.tolist()} are not whole frames; "
                    "delta_frames counts frames (integers), delta_timestamps takes seconds"
                )
            values = whole
        if np.any(np.abs(values) > MAX_OFFSET_FRAMES):
            raise WindowError(f"delta_frames[{key!r}]: offsets past 2**40 frames")
        offsets[key] = values.astype(np.int64)
    return offsets


def frames_on_grid(
    deltas: np.ndarray, fps: float, tolerance_s: float = DEFAULT_TOLERANCE_S
) -> tuple[np.ndarray, np.ndarray]:
    """(nearest frame offsets (int64), True where a delta is off the 1/fps grid).

    >>> frames_on_grid(np.array([0.0, 0.04, 0.05]), fps=25)
    (array([0, 1, 1]), array([False, False,  True]))
    """
    deltas = np.asarray(deltas, dtype=np.float64)
    frames = np.floor(deltas * fps + 0.5)  # the nearest frame, halves away from -inf
    return frames.astype(np.int64), np.abs(frames / fps - deltas) > tolerance_s


def off_grid_message(
    key: str, deltas: Sequence[float], fps: float, tolerance_s: float = DEFAULT_TOLERANCE_S
) -> str:
    """What is wrong with a window off a dataset's frame grid, and the nearest valid values."""
    deltas = np.asarray(deltas, dtype=np.float64)
    frames, bad = frames_on_grid(deltas, fps, tolerance_s)
    nearest = [round(float(f) / fps, 6) for f in frames[bad]]
    return (
        f"delta_timestamps[{key!r}]: {deltas[bad].tolist()} s are not multiples of "
        f"1/fps = 1/{fps:g} s (tolerance {tolerance_s} s); the nearest valid values are "
        f"{nearest} (frames {frames[bad].tolist()})"
    )


def window_frames(
    frame: np.ndarray, length: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Frame indices of each anchor's window, clamped to its episode, and the pad mask.

    Args:
      frame: (B,) frame index of each anchor within its episode.
      length: (B,) length of each anchor's episode.
      offsets: (T,) integer frame offsets.

    Returns:
      (B, T) clamped frame indices and (B, T) booleans, True where clamping happened.
    """
    wanted = frame[:, None] + offsets[None, :]
    last = length[:, None] - 1
    is_pad = (wanted < 0) | (wanted > last)
    return np.clip(wanted, 0, last), is_pad
