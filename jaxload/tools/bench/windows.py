"""The benchmark's windows (`delta_timestamps`) and the video frames they deliver per sample.

Every pipeline measured (jaxload's loader, its decode limit, LeRobotDataset) reads the same
windows, so their samples/s compare.

Example:
    >>> windows = bench_windows("out/my_dataset")
    >>> frames_per_sample(windows, ["observation.images.top"])
    2
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Windows = dict[str, list[float]]

# Keys the benchmark windows use when a dataset has them (LeRobot's names).
ACTION_KEY = "action"
STATE_KEY = "observation.state"
ACTION_STEPS = 16
STATE_OFFSETS = (-2, -1, 0)  # two past state frames and the current one
FIRST_CAMERA_OFFSETS = (-1, 0)  # the first camera: previous and current frame
OTHER_CAMERA_OFFSETS = (0,)  # every other camera: the current frame


def bench_windows(dataset: Any) -> Windows:
    """The benchmark's `delta_timestamps` for a dataset (a path or an opened dataset).

    A 16-step action chunk, two past state frames plus the current one, two frames (previous
    and current) of the first camera and the current frame of every other camera; keys the
    dataset lacks are left out.

    Example:
        >>> bench_windows("out/my_dataset")["action"][:3]
        [0.0, 0.0333..., 0.0666...]
    """
    info = _info(dataset)
    fps = info.fps
    windows: Windows = {}
    if ACTION_KEY in info.features:
        windows[ACTION_KEY] = [k / fps for k in range(ACTION_STEPS)]
    if STATE_KEY in info.features:
        windows[STATE_KEY] = [k / fps for k in STATE_OFFSETS]
    for i, cam in enumerate(sorted(info.cameras)):
        offsets = FIRST_CAMERA_OFFSETS if i == 0 else OTHER_CAMERA_OFFSETS
        windows[cam] = [k / fps for k in offsets]
    return windows


def frames_per_sample(windows: Mapping[str, Sequence[float]], cameras: Iterable[str]) -> int:
    """Video frames one sample delivers: each camera's window length (1 when unwindowed)."""
    return sum(len(windows.get(cam, [0.0])) for cam in cameras)


def _info(dataset: Any) -> Any:
    from jaxload import format as fmt

    if isinstance(dataset, str | os.PathLike):
        return fmt.read_info(dataset)
    return dataset.info
