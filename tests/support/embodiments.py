"""Four LeRobot v3.0 datasets as different as a cross-embodiment mixture's (issue 34), for the
tests, the docs' recipe and benchmarks/bench_mixture.py:

| name | fps | cameras | state / action |
|---|---|---|---|
| `arm_av1_15fps` | 15 | AV1 `top`, `wrist`, `side` 96x128 | 7 / 7 |
| `bimanual_h264_25fps` | 25 | H.264 `cam_high`, `cam_wrist` 224x224 | 14 / 14 |
| `png_10fps` | 10 | PNG `image` 96x128 and `wrist_image` 64x64 (LeRobot `image` features) | 8 / 7 |
| `mobile_av1_30fps` | 30 | AV1 `front` 480x640, no wrist camera | 6 / 6 |

Each has its own tasks. `CAMERAS` maps each to a primary and a wrist camera.

    sources = write_embodiments(tmp_path / "src")            # LeRobot datasets
    converted = convert_embodiments(sources, tmp_path / "out")
"""

from __future__ import annotations

from pathlib import Path

from tests.support.lerobot_factory import write_lerobot_v3

PRIMARY, WRIST = "observation.images.primary", "observation.images.wrist"
SPECS = {
    "arm_av1_15fps": dict(
        fps=15,
        video_codec="av1",
        cameras={
            "observation.images.top": (96, 128),
            "observation.images.wrist": (96, 128),
            "observation.images.side": (96, 128),
        },
        state_dim=7,
        action_dim=7,
        tasks=("stack the red block on the blue one", "open the drawer"),
    ),
    "bimanual_h264_25fps": dict(
        fps=25,
        video_codec="h264",
        cameras={
            "observation.images.cam_high": (224, 224),
            "observation.images.cam_wrist": (224, 224),
        },
        state_dim=14,
        action_dim=14,
        tasks=("fold the towel", "hand over the cup"),
    ),
    "png_10fps": dict(
        fps=10,
        cameras={},
        image_cameras={"image": (96, 128), "wrist_image": (64, 64)},
        state_dim=8,
        action_dim=7,
        tasks=("put the bowl in the sink",),
    ),
    "mobile_av1_30fps": dict(
        fps=30,
        video_codec="av1",
        cameras={"observation.images.front": (480, 640)},
        state_dim=6,
        action_dim=6,
        tasks=("drive to the kitchen", "dock at the charger"),
    ),
}
# batch camera key -> each dataset's own camera (None: it has none)
CAMERAS = {
    "arm_av1_15fps": {PRIMARY: "observation.images.top", WRIST: "observation.images.wrist"},
    "bimanual_h264_25fps": {
        PRIMARY: "observation.images.cam_high",
        WRIST: "observation.images.cam_wrist",
    },
    "png_10fps": {PRIMARY: "image", WRIST: "wrist_image"},
    "mobile_av1_30fps": {PRIMARY: "observation.images.front", WRIST: None},
}
LENGTHS = {
    "arm_av1_15fps": (18, 9, 24),
    "bimanual_h264_25fps": (30, 21),
    "png_10fps": (18, 24, 14),
    "mobile_av1_30fps": (36, 25),
}


def write_embodiments(root: Path, scale: int = 1) -> dict[str, Path]:
    """The four LeRobot sources under `root`, episodes `scale` times as many."""
    out = {}
    for name, spec in SPECS.items():
        spec = dict(spec)
        tasks = spec.pop("tasks")
        lengths = LENGTHS[name] * scale
        out[name] = write_lerobot_v3(
            Path(root) / name,
            episode_lengths=lengths,
            episode_tasks=[tasks[i % len(tasks)] for i in range(len(lengths))],
            **spec,
        )
    return out


def convert_embodiments(sources: dict[str, Path], root: Path, **kwargs) -> dict[str, Path]:
    """Each source converted under `root` (same names); `kwargs` go to convert."""
    from jaxload.converters.convert import convert

    out = {}
    for name, src in sources.items():
        out[name] = Path(root) / name
        convert(src, out[name], workers=1, progress=False, **kwargs)
    return out
