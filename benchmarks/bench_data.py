"""Benchmark datasets: LeRobot v3.0 sources written like lerobot 0.4.4, converted, cached.

Sources come from `tests.support.lerobot_factory.write_lerobot_v3` (AV1 through SVT-AV1 with
LeRobot's settings: g=2, crf=30, preset 12; yuv420p) with the factory's textured scenes
(wall, wood-grain table, a moving shaded disc, frame-index LEDs). The factory renders every
frame from scratch (~50 ms at 480x640); `fast_render_frame` gives the same pixels in a few
ms by computing the static background once per camera and only the disc's neighbourhood per
frame (tests/tools/test_bench.py checks it is identical), and is swapped in while generating.

Everything lands under a cache directory (default runs/bench/); a dataset whose directory
exists is reused, and its name spells out its parameters, so changing them regenerates.

Example:
    >>> spec = DatasetSpec("small", height=96, width=128, episodes=30)
    >>> src, out = prepare(spec, Path("runs/bench"))   # LeRobot source, jaxload dataset
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support import lerobot_factory  # noqa: E402

FPS = 30
CAMERAS = ("observation.images.top", "observation.images.wrist")
DEFAULT_CACHE = REPO_ROOT / "runs" / "bench"


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """A generated benchmark dataset: size, cameras, episode lengths (seeded)."""

    name: str
    height: int
    width: int
    episodes: int
    min_length: int = 10
    max_length: int = 600
    seed: int = 0
    cameras: int = 2
    codec: str = "av1"
    episodes_per_video_file: int | None = None

    @property
    def dirname(self) -> str:
        """Directory name: every parameter that changes the content."""
        cams = f"{self.cameras}cam"
        lengths = f"len{self.min_length}-{self.max_length}"
        return (
            f"{self.name}-{self.height}x{self.width}-{cams}-{self.episodes}ep-{lengths}"
            f"-seed{self.seed}-{self.codec}"
        )

    def episode_lengths(self) -> list[int]:
        """Lengths drawn uniformly in [min, max] with the seed; both extremes always occur."""
        rng = np.random.default_rng(self.seed)
        lengths = rng.integers(self.min_length, self.max_length + 1, size=self.episodes)
        if self.episodes >= 2:
            lengths[int(np.argmin(lengths))] = self.min_length
            lengths[int(np.argmax(lengths))] = self.max_length
        return [int(x) for x in lengths]

    def camera_shapes(self) -> dict[str, tuple[int, int]]:
        keys = (
            CAMERAS[: self.cameras]
            if self.cameras <= len(CAMERAS)
            else [f"observation.images.cam{i}" for i in range(self.cameras)]
        )
        return {k: (self.height, self.width) for k in keys}


# The benchmark datasets (benchmarks/run.py and the side benchmarks measure these).
SMALL = DatasetSpec("small", height=96, width=128, episodes=50)
# 480x640 sources cost ~22 ms/frame to generate and ~75 ms/frame to convert here (2 cores):
# 12 episodes (~3,600 frames) keep both within a few minutes.
LARGE = DatasetSpec("large", height=480, width=640, episodes=12)
QUICK = {
    "small": dataclasses.replace(SMALL, episodes=4, max_length=120),
    "large": dataclasses.replace(LARGE, episodes=2, max_length=40),
}


def specs_for(quick: bool, only: list[str] | None = None) -> dict[str, DatasetSpec]:
    """The benchmark datasets by label ("small", "large"); tiny ones with `quick`."""
    chosen = QUICK if quick else {"small": SMALL, "large": LARGE}
    return {k: v for k, v in chosen.items() if not only or k in only}


# --- fast, identical frames ------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _background(height: int, width: int, camera_index: int) -> tuple[np.ndarray, ...]:
    """The static parts of render_frame: coordinates, float image, its uint8 rendering."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    x = x * (1.0 - 0.15 * camera_index) + 6.0 * camera_index
    horizon = height * (0.42 + 0.06 * camera_index)
    wall = np.stack([150 + 0.3 * y, 160 + 0.2 * y, 175 - 0.1 * y], axis=-1)
    wall += 6.0 * np.sin(0.9 * x + 1.3 * y)[..., None]
    grain = 0.5 + 0.5 * np.sin(0.55 * x + 4.0 * np.sin(0.11 * y + 0.7 * camera_index))
    table = np.array([150.0, 100.0, 60.0]) * (0.7 + 0.3 * grain)[..., None]
    image = np.where((y < horizon)[..., None], wall, table)
    rendered = np.clip(np.rint(image), 0, 255).astype(np.uint8)
    for a in (y, x, image, rendered):
        a.flags.writeable = False
    return y, x, image, rendered, np.float64(horizon)


_SLOW_RENDER = lerobot_factory.render_frame


def fast_render_frame(
    height: int,
    width: int,
    episode_index: int,
    frame_index: int,
    camera_index: int = 0,
    noise: float = 0.0,
) -> np.ndarray:
    """`tests.support.lerobot_factory.render_frame`, pixel for pixel, computing only what moves
    (noisy frames change everywhere: those take the factory's renderer)."""
    if noise:
        return _SLOW_RENDER(height, width, episode_index, frame_index, camera_index, noise)
    y, x, background, rendered, horizon = _background(height, width, camera_index)
    led, gap = lerobot_factory.led_geometry(height, width)
    if width < gap + 8 * (led + gap) or height < 2 * (led + gap):
        raise ValueError(f"image {height}x{width} is too small for the 8 frame-index LEDs")
    t = float(frame_index)
    cx = width * (0.5 + 0.3 * np.sin(0.23 * t + 0.9 * episode_index))
    cy = horizon + (height - horizon) * (0.45 + 0.2 * np.cos(0.17 * t + 0.5 * episode_index))
    radius = 0.14 * min(height, width)
    # Pixels the disc or its shadow can touch, in pixel rows/columns (x is scaled per camera).
    scale, shift = 1.0 - 0.15 * camera_index, 6.0 * camera_index
    c0 = max(0, int(np.floor((cx - radius - shift) / scale)) - 2)
    c1 = min(width, int(np.ceil((cx + 1.3 * radius - shift) / scale)) + 3)
    r0 = max(0, int(np.floor(cy - radius)) - 2)
    r1 = min(height, int(np.ceil(cy + 1.4 * radius)) + 3)
    frame = rendered.copy()
    if r0 < r1 and c0 < c1:
        ys, xs = y[r0:r1, c0:c1], x[r0:r1, c0:c1]
        image = background[r0:r1, c0:c1].copy()
        shadow = ((xs - cx - 0.3 * radius) ** 2 + (ys - cy - 0.4 * radius) ** 2) < radius**2
        image[shadow] *= 0.55
        dist = np.sqrt((xs - cx) ** 2 + (ys - cy) ** 2)
        light = np.sqrt((xs - cx + 0.4 * radius) ** 2 + (ys - cy + 0.4 * radius) ** 2) / (
            2 * radius
        )
        shade = np.clip(1.1 - light, 0.35, 1.0)[..., None]
        colour = lerobot_factory._episode_colour(episode_index)
        image = np.where((dist < radius)[..., None], colour * shade, image)
        frame[r0:r1, c0:c1] = np.clip(np.rint(image), 0, 255).astype(np.uint8)
    lerobot_factory._draw_leds(frame, frame_index)
    return frame


@contextlib.contextmanager
def fast_frames() -> Iterator[None]:
    """Makes write_lerobot_v3 render with fast_render_frame for the duration."""
    original = lerobot_factory.render_frame
    lerobot_factory.render_frame = fast_render_frame
    try:
        yield
    finally:
        lerobot_factory.render_frame = original


# --- generation and conversion, cached -------------------------------------------------------


def quiet_encoders() -> None:
    """SVT-AV1 prints its configuration for every episode; keep errors only."""
    os.environ.setdefault("SVT_LOG", "1")


def write_source(spec: DatasetSpec, cache: Path, log=print) -> Path:
    """The LeRobot v3.0 source for `spec` under `cache` (generated unless present)."""
    out = Path(cache) / f"{spec.dirname}-lerobot"
    if (out / "meta" / "info.json").is_file():
        return out
    quiet_encoders()
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    lengths = spec.episode_lengths()
    log(f"generating {out.name}: {len(lengths)} episodes, {sum(lengths)} frames ...")
    started = time.perf_counter()
    try:
        with fast_frames():
            lerobot_factory.write_lerobot_v3(
                tmp,
                fps=FPS,
                episode_lengths=lengths,
                cameras=spec.camera_shapes(),
                video_codec=spec.codec,
                state_dim=8,
                action_dim=8,
                episodes_per_video_file=spec.episodes_per_video_file,
            )
        seconds = time.perf_counter() - started
        _generation_record(out).write_text(
            json.dumps({"spec": dataclasses.asdict(spec), "seconds": seconds}, indent=2)
        )
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"  generated in {seconds:.0f} s")
    return out


def convert_cached(
    src: Path, out: Path, log=print, workers: int | None = None, **options: Any
) -> dict[str, Any]:
    """Converts `src` to `out` unless present; returns the conversion report (saved beside)."""
    from jaxload.converters.convert import convert

    report_path = out.parent / f"{out.name}.convert.json"
    if out.is_dir() and report_path.is_file():
        return json.loads(report_path.read_text())
    if out.exists():
        shutil.rmtree(out)
    log(f"converting {src.name} -> {out.name} {options or ''} ...")
    report = convert(src, out, workers=workers, progress=False, **options)
    doc = {
        "seconds": report.seconds,
        "episodes": report.episodes,
        "frames": report.frames,
        "source_bytes": report.source_bytes,
        "output_bytes": report.output_bytes,
        "size_ratio": report.output_bytes / max(report.source_bytes, 1),
        "psnr_db": {cam: {"min": lo, "mean": mean} for cam, (lo, mean) in report.psnr.items()},
        "options": options,
    }
    report_path.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"  converted in {report.seconds:.0f} s (size ratio {doc['size_ratio']:.2f})")
    return doc


def prepare(
    spec: DatasetSpec,
    cache: Path = DEFAULT_CACHE,
    log=print,
    workers: int | None = None,
    **options: Any,
) -> tuple[Path, Path]:
    """(LeRobot source, converted jaxload dataset) for `spec`, generated/converted if absent.

    `options` go to `converters.convert.convert` (e.g. `video_codec`, `gop`, `episodes`) and
    name the converted directory, together with a digest of the converter's code, so a
    changed converter or format never reuses a stale conversion.
    """
    src = write_source(spec, cache, log)
    suffix = "".join(f"-{k}{v}" for k, v in sorted(options.items()))
    out = Path(cache) / f"{spec.dirname}-jaxload{suffix}-{converter_digest()}"
    convert_cached(src, out, log, workers=workers, **options)
    return src, out


def converter_digest() -> str:
    """Short sha256 of the code that decides a converted dataset's bytes."""
    # Not the converter's uploading, diagnosing or progress code: it writes no dataset byte.
    unrelated = {"publish.py", "doctor.py", "progress.py"}
    files = [
        p
        for p in sorted((REPO_ROOT / "jaxload" / "converters").glob("*.py"))
        if p.name not in unrelated
    ]
    files += sorted((REPO_ROOT / "jaxload" / "format").glob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:10]


def _generation_record(src: Path) -> Path:
    return Path(src).parent / f"{Path(src).name}.generation.json"


def generation_seconds(src: Path) -> float | None:
    """How long generating a cached source took (None when unknown)."""
    path = _generation_record(src)
    return json.loads(path.read_text())["seconds"] if path.is_file() else None


def dataset_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())


def summarize_lengths(lengths: Sequence[int]) -> str:
    a = np.asarray(lengths)
    return f"{len(a)} episodes, {int(a.sum())} frames, lengths {a.min()}..{a.max()} (mean {a.mean():.0f})"
