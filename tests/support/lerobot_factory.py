"""Write small synthetic LeRobot **v3.0** datasets (parquet + mp4) for tests.

No dependency on the ``lerobot`` package; the files follow what lerobot 0.4.4 writes
(``LeRobotDataset.create`` + ``add_frame`` / ``save_episode`` / ``finalize``), compared against
the fixtures in ``shared/data/lerobot``:

* ``data/chunk-XXX/file-YYY.parquet``: one row group per episode, vectors as
  ``fixed_size_list<float>``, scalars as plain columns, a ``huggingface`` schema-metadata entry.
* ``meta/episodes/chunk-XXX/file-YYY.parquet``: one row per episode, row groups of up to 10
  episodes (lerobot's metadata buffer), per-episode stats as ``stats/<key>/<stat>`` list columns.
* ``meta/tasks.parquet``: pandas layout (task string as ``__index_level_0__``, ``task_index``).
* ``meta/info.json``, ``meta/stats.json``: ``json.dump(indent=4)``, no trailing newline.
* ``videos/<key>/chunk-XXX/file-YYY.mp4``: each episode is encoded on its own with PyAV
  (lerobot's options), then appended by a stream-copy remux through ffmpeg's concat demuxer, so
  an episode inside a shared file starts at ``from_timestamp`` = the sum of the durations before it.

Frame content identifies itself: ``observation.state[0] = episode_index * 10000 + frame_index``
(:func:`frame_state`), ``action[0]`` is that + 0.5, and every image carries a row of 8 LEDs
showing ``frame_index % 256`` (:func:`decode_frame_leds`), as in the shared fixtures.

Files are split by episode counts (lerobot splits by file size) and lerobot's
``list(set(tasks))`` order for multi-task episodes is replaced by order of first appearance.
"""

from __future__ import annotations

import colorsys
import hashlib
import io
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxload.converters.video import x264_asm_cap

__all__ = [
    "aggregate_stats",
    "decode_frame_leds",
    "feature_stats",
    "frame_state",
    "image_stats",
    "led_geometry",
    "render_frame",
    "write_lerobot_v3",
]

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 200
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
META_ROW_GROUP = 10  # lerobot's metadata_buffer_size
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
NUM_QUANTILE_BINS = 5000
DEFAULT_TASKS = ("pick up the cube and put it in the bowl", "push the cube to the left edge")
DEFAULT_CAMERAS: Mapping[str, tuple[int, int]] = {"observation.images.top": (48, 64)}
# libx264 via PyAV's "h264" name (has_b_frames=1, edit list) / SVT-AV1 preset 12, as lerobot.
VIDEO_CODECS = {
    "h264": ("h264", {"g": "2", "crf": "30"}),
    "av1": ("libsvtav1", {"g": "2", "crf": "30", "preset": "12"}),
    # Longer GOPs with reordering, as other recorders write: H.264 with 3 B-frames (packets
    # out of presentation order, composition offsets); HEVC with B-frames and x265's
    # default open GOPs (CRA keyframes whose leading frames reference the GOP before);
    # AV1 with hidden alt-ref frames shown later (show_existing_frame).
    "h264-bframes": ("h264", {"g": "8", "bf": "3", "crf": "30"}),
    "hevc-bframes": (
        "libx265",
        {"g": "8", "crf": "30", "x265-params": "bframes=3:log-level=error:pools=none"},
    ),
    "av1-hidden": ("libsvtav1", {"g": "16", "crf": "30", "preset": "12"}),
}
DEFAULT_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
EXTRA_DTYPES = ("float32", "int64", "bool")
# pandas' DataFrame.to_parquet metadata for lerobot's tasks table (pandas 3.1.1, as in the fixtures).
TASKS_PANDAS_META = {
    "index_columns": ["__index_level_0__"],
    "column_indexes": [
        {
            "name": None,
            "field_name": None,
            "pandas_type": "unicode",
            "numpy_type": "str",
            "metadata": {"encoding": "UTF-8"},
        }
    ],
    "columns": [
        {
            "name": "task_index",
            "field_name": "task_index",
            "pandas_type": "int64",
            "numpy_type": "int64",
            "metadata": None,
        },
        {
            "name": None,
            "field_name": "__index_level_0__",
            "pandas_type": "object",
            "numpy_type": "str",
            "metadata": None,
        },
    ],
    "attributes": {},
    "creator": {"library": "pyarrow", "version": pa.__version__},
    "pandas_version": "3.1.1",
}

LED_ON = (60, 230, 90)
LED_OFF = (25, 25, 25)
LED_THRESHOLD = 120


# --------------------------------------------------------------------------- frame content


def frame_state(episode_index: int, frame_index: int) -> float:
    """``observation.state[0]`` of a frame (``action[0]`` is this + 0.5); exact in float32."""
    return float(episode_index * 10000 + frame_index)


def led_geometry(height: int, width: int) -> tuple[int, int]:
    """``(led, gap)``: LED square side and spacing for an image of this size."""
    led = max(4, min(height, width) // 20)
    return led, max(1, led // 2)


def _led_box(height: int, width: int, bit: int) -> tuple[int, int, int]:
    """Top row, left column and side of the square for ``bit``."""
    led, gap = led_geometry(height, width)
    return height - led - gap, gap + bit * (led + gap), led


def _draw_leds(image: np.ndarray, frame_index: int) -> None:
    """Paint ``frame_index % 256`` in binary, LSB left, into the bottom-left corner."""
    height, width = image.shape[:2]
    for bit in range(8):
        top, left, led = _led_box(height, width, bit)
        lit = (frame_index >> bit) & 1
        image[top : top + led, left : left + led] = LED_ON if lit else LED_OFF


def decode_frame_leds(image: np.ndarray) -> int:
    """Read ``frame_index % 256`` back from the LEDs of an ``(H, W, 3)`` uint8 RGB image.

    A bit is lit when the mean green of its square's interior is above 120 (survives
    lossy coding and 4:2:0 chroma subsampling).
    """
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"expected an (H, W, 3) image, got shape {image.shape}")
    height, width = image.shape[:2]
    value = 0
    for bit in range(8):
        top, left, led = _led_box(height, width, bit)
        inner = image[top + 1 : top + led - 1, left + 1 : left + led - 1, 1]
        if float(inner.mean()) > LED_THRESHOLD:
            value |= 1 << bit
    return value


def _episode_colour(episode_index: int) -> np.ndarray:
    """A saturated per-episode colour (golden-ratio hue walk)."""
    hue = (episode_index * 0.618034) % 1.0
    return np.array(colorsys.hsv_to_rgb(hue, 0.8, 0.95)) * 255.0


def render_frame(
    height: int,
    width: int,
    episode_index: int,
    frame_index: int,
    camera_index: int = 0,
    noise: float = 0.0,
) -> np.ndarray:
    """A textured scene: wall, wood-grain table, moving shaded disc (per-episode colour), LEDs.

    `noise`: standard deviation of Gaussian sensor noise (in 0..255 units), seeded by the
    frame's identity, so footage-like content stays deterministic."""
    led, gap = led_geometry(height, width)
    if width < gap + 8 * (led + gap) or height < 2 * (led + gap):
        raise ValueError(f"image {height}x{width} is too small for the 8 frame-index LEDs")
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    x = x * (1.0 - 0.15 * camera_index) + 6.0 * camera_index  # other cameras: shifted, closer
    horizon = height * (0.42 + 0.06 * camera_index)
    wall = np.stack([150 + 0.3 * y, 160 + 0.2 * y, 175 - 0.1 * y], axis=-1)
    wall += 6.0 * np.sin(0.9 * x + 1.3 * y)[..., None]  # fine texture
    grain = 0.5 + 0.5 * np.sin(0.55 * x + 4.0 * np.sin(0.11 * y + 0.7 * camera_index))
    table = np.array([150.0, 100.0, 60.0]) * (0.7 + 0.3 * grain)[..., None]
    image = np.where((y < horizon)[..., None], wall, table)
    t = float(frame_index)
    cx = width * (0.5 + 0.3 * np.sin(0.23 * t + 0.9 * episode_index))
    cy = horizon + (height - horizon) * (0.45 + 0.2 * np.cos(0.17 * t + 0.5 * episode_index))
    radius = 0.14 * min(height, width)
    shadow = ((x - cx - 0.3 * radius) ** 2 + (y - cy - 0.4 * radius) ** 2) < radius**2
    image[shadow] *= 0.55
    dist = np.sqrt((x - cx) ** 2 + (y - cy) ** 2)
    light = np.sqrt((x - cx + 0.4 * radius) ** 2 + (y - cy + 0.4 * radius) ** 2) / (2 * radius)
    shade = np.clip(1.1 - light, 0.35, 1.0)[..., None]
    image = np.where((dist < radius)[..., None], _episode_colour(episode_index) * shade, image)
    if noise:
        rng = np.random.default_rng([episode_index, frame_index, camera_index])
        image = image + rng.normal(0.0, noise, image.shape)
    frame = np.clip(np.rint(image), 0, 255).astype(np.uint8)
    _draw_leds(frame, frame_index)
    return frame


def _sinusoids(episode_index: int, dims: int, steps: np.ndarray) -> np.ndarray:
    """Smooth per-episode signals in about [-1, 1], shape ``(len(steps), dims)``."""
    j = np.arange(dims, dtype=np.float64)
    freq = 0.05 + 0.03 * ((episode_index * 7 + j * 3) % 5)
    phase = 0.7 * episode_index + 1.3 * j
    offset = 0.15 * np.sin(episode_index + j)
    return 0.8 * np.sin(np.outer(steps, freq) + phase) + offset


def _state_action(
    episode_index: int, length: int, state_dim: int, action_dim: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(state, action)`` float32 arrays; ``action[t, 1:]`` continues as ``state[t + 1, 1:]``."""
    steps = np.arange(length + 1, dtype=np.float64)
    dims = max(state_dim, action_dim)
    wave = _sinusoids(episode_index, dims, steps)
    first = np.array([frame_state(episode_index, t) for t in range(length)])
    state = wave[:length, :state_dim].copy()
    action = wave[1:, :action_dim].copy()
    state[:, 0] = first
    action[:, 0] = first + 0.5
    return state.astype(np.float32), action.astype(np.float32)


def _extra_column(dtype: str, episode_index: int, length: int) -> np.ndarray:
    """Deterministic scalar column, shape ``(length, 1)``.

    float32: progress ``frame_index / length``; int64: ``frame_state`` as int;
    bool: ``True`` on the last frame (a ``next.done`` flag).
    """
    frames = np.arange(length)
    if dtype == "float32":
        values = (frames / length).astype(np.float32)
    elif dtype == "int64":
        values = episode_index * 10000 + frames
    elif dtype == "bool":
        values = frames == length - 1
    else:
        raise ValueError(f"extra feature dtype must be one of {EXTRA_DTYPES}, got {dtype!r}")
    return values.reshape(length, 1)


# --------------------------------------------------------------------------- stats (lerobot's)


def _quantile(hist: np.ndarray, edges: np.ndarray, target: float) -> float:
    """Linear interpolation inside the histogram bin that holds ``target`` samples."""
    cumsum = np.cumsum(hist)
    idx = np.searchsorted(cumsum, target)
    if idx == 0:
        return edges[0]
    if idx >= len(cumsum):
        return edges[-1]
    before = cumsum[idx - 1]
    in_bin = cumsum[idx] - before
    if in_bin == 0:
        return edges[idx]
    return edges[idx] + (target - before) / in_bin * (edges[idx + 1] - edges[idx])


def _histogram_stats(batch: np.ndarray) -> dict[str, np.ndarray]:
    """lerobot's ``RunningQuantileStats`` after a single ``update`` (same numpy ops).

    As in lerobot, ``batch**2`` keeps the input dtype, so uint8 images overflow and their
    ``std`` usually comes out 0.
    """
    mean = np.mean(batch, axis=0)
    variance = np.mean(batch**2, axis=0) - mean**2
    low, high = np.min(batch, axis=0), np.max(batch, axis=0)
    stats = {"min": low, "max": high, "mean": mean, "std": np.sqrt(np.maximum(0, variance))}
    stats["count"] = np.array([len(batch)])
    columns = batch.astype(np.uint8) if batch.dtype == np.bool_ else batch
    hists, edges = [], []
    for i in range(batch.shape[1]):
        edge = np.linspace(low[i] - 1e-10, high[i] + 1e-10, NUM_QUANTILE_BINS + 1)
        hists.append(np.histogram(columns[:, i], bins=edge)[0].astype(np.float64))
        edges.append(edge)
    for q in QUANTILES:
        values = [_quantile(h, e, q * len(batch)) for h, e in zip(hists, edges, strict=True)]
        stats[f"q{int(q * 100):02d}"] = np.array(values)
    return stats


def _basic_stats(batch: np.ndarray) -> dict[str, np.ndarray]:
    """lerobot's stats for fewer than 2 samples: quantiles = mean."""
    mean = np.mean(batch, axis=0)
    stats = {"min": np.min(batch, axis=0), "max": np.max(batch, axis=0), "mean": mean}
    stats |= {"std": np.std(batch, axis=0), "count": np.array([len(batch)])}
    return stats | {f"q{int(q * 100):02d}": mean.copy() for q in QUANTILES}


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Per-episode stats of a tabular feature, ``values`` of shape ``(frames, dims)``."""
    return _basic_stats(values) if len(values) < 2 else _histogram_stats(values)


def _sample_indices(length: int) -> list[int]:
    """lerobot's ``sample_indices``: at least 100 (or all) frames, ~length**0.75."""
    num = max(min(100, length), min(int(length**0.75), 10_000))
    return np.round(np.linspace(0, length - 1, num)).astype(int).tolist()


def image_stats(frames: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Per-episode stats of a camera from its (sampled) source frames, values in [0, 1], (3, 1, 1)."""
    images = np.stack([frames[i] for i in _sample_indices(len(frames))])  # N, H, W, C
    if max(images.shape[1:3]) >= 300:  # lerobot's auto_downsample_height_width
        factor = int(max(images.shape[1:3]) / 150)
        images = images[:, ::factor, ::factor]
    stats = _histogram_stats(images.reshape(-1, images.shape[-1]))
    stats["count"] = np.array([len(images)])
    return {k: v if k == "count" else v.reshape(-1, 1, 1) / 255.0 for k, v in stats.items()}


def aggregate_stats(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """lerobot's ``aggregate_feature_stats``: count-weighted mean/variance/quantiles."""
    means = np.stack([s["mean"] for s in parts])
    variances = np.stack([s["std"] ** 2 for s in parts])
    counts = np.stack([s["count"] for s in parts])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    out = {
        "min": np.min(np.stack([s["min"] for s in parts]), axis=0),
        "max": np.max(np.stack([s["max"] for s in parts]), axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": total,
    }
    for key in (k for k in parts[0] if k.startswith("q") and k[1:].isdigit()):
        out[key] = (np.stack([s[key] for s in parts]) * counts).sum(axis=0) / total
    return out


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class _Episode:
    """One episode's place in the dataset."""

    index: int
    length: int
    start: int  # global index of its first frame
    frame_tasks: tuple[str, ...]

    @property
    def tasks(self) -> list[str]:
        """Distinct tasks in order of first appearance."""
        return list(dict.fromkeys(self.frame_tasks))


def _frame_tasks(tasks: str | Sequence[str], length: int) -> tuple[str, ...]:
    """Per-frame task strings; a multi-task episode is cut into equal consecutive parts."""
    names = [tasks] if isinstance(tasks, str) else list(tasks)
    if not names or len(names) > length:
        raise ValueError(f"an episode of {length} frames cannot hold tasks {names}")
    return tuple(names[t * len(names) // length] for t in range(length))


def _plan(lengths: Sequence[int], tasks: Sequence[str | Sequence[str]] | None) -> list[_Episode]:
    """Episodes with global start indices and per-frame tasks."""
    if not lengths or min(lengths) < 1:
        raise ValueError(f"episode lengths must be >= 1, got {list(lengths)}")
    if tasks is None:
        tasks = [DEFAULT_TASKS[i % len(DEFAULT_TASKS)] for i in range(len(lengths))]
    if len(tasks) != len(lengths):
        raise ValueError(f"{len(tasks)} episode_tasks for {len(lengths)} episodes")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    return [
        _Episode(i, int(n), int(s), _frame_tasks(t, int(n)))
        for i, (n, s, t) in enumerate(zip(lengths, starts, tasks, strict=True))
    ]


def _file_numbers(num_episodes: int, per_file: int | None) -> list[int]:
    """Running file number of each episode when a file holds ``per_file`` episodes."""
    if per_file is not None and per_file < 1:
        raise ValueError(f"episodes per file must be >= 1, got {per_file}")
    return [0 if per_file is None else i // per_file for i in range(num_episodes)]


def _chunk_file(number: int) -> tuple[int, int]:
    """``(chunk_index, file_index)`` of the n-th file (``chunks_size`` files per chunk)."""
    return divmod(number, CHUNKS_SIZE)


def _path(root: Path, template: str, number: int, **kw: str) -> Path:
    """Path of the n-th file of a kind (parent directory created)."""
    chunk, file = _chunk_file(number)
    path = root / template.format(chunk_index=chunk, file_index=file, **kw)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------- parquet


def _hf_feature(ft: Mapping[str, Any]) -> dict[str, Any]:
    """The ``datasets`` feature JSON lerobot's HF dataset stores for a LeRobot feature."""
    if ft["dtype"] == "image":
        return {"_type": "Image"}
    value = {"dtype": ft["dtype"], "_type": "Value"}
    if list(ft["shape"]) == [1]:
        return value
    return {"feature": value, "length": ft["shape"][0], "_type": "List"}


def _arrow_column(values: Any, ft: Mapping[str, Any]) -> pa.Array:
    """Scalars as plain arrays, vectors as ``fixed_size_list`` (as ``datasets`` writes them),
    images as ``struct<bytes, path>`` of PNGs and strings as ``string``."""
    if ft["dtype"] == "image":
        return pa.array(
            [{"bytes": png, "path": f"frame-{i:06d}.png"} for i, png in enumerate(values)],
            type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
        )
    if ft["dtype"] == "string":
        return pa.array([str(v) for v in np.asarray(values).reshape(-1)], type=pa.string())
    arrow_type = pa.bool_() if ft["dtype"] == "bool" else pa.from_numpy_dtype(np.dtype(ft["dtype"]))
    flat = pa.array(np.ascontiguousarray(values).reshape(-1).astype(ft["dtype"]), type=arrow_type)
    if list(ft["shape"]) == [1]:
        return flat
    return pa.FixedSizeListArray.from_arrays(flat, ft["shape"][0])


class _DataWriter:
    """Appends one row group per episode to ``data/`` files, switching file per plan."""

    def __init__(self, root: Path, features: Mapping[str, Mapping[str, Any]]):
        self.root, self.features = root, features
        self.number: int | None = None
        self.writer: pq.ParquetWriter | None = None

    def write(self, number: int, columns: Mapping[str, np.ndarray], episode: int) -> None:
        table = pa.table({k: _arrow_column(columns[k], ft) for k, ft in self.features.items()})
        if number != self.number:
            self.close()
            self.number = number
            fingerprint = hashlib.blake2b(f"{number}:{episode}".encode(), digest_size=8)
            meta = {
                "info": {"features": {k: _hf_feature(ft) for k, ft in self.features.items()}},
                "fingerprint": fingerprint.hexdigest(),
            }
            schema = table.schema.with_metadata({"huggingface": json.dumps(meta)})
            path = _path(self.root, DATA_PATH, number)
            self.writer = pq.ParquetWriter(
                path, schema=schema, compression="snappy", use_dictionary=True
            )
        assert self.writer is not None
        self.writer.write_table(table)

    def close(self) -> None:
        """Finish the current file (writes the parquet footer)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _to_list(value: Any) -> Any:
    """numpy -> plain Python (what lerobot hands to ``pa.Table.from_pydict`` / json)."""
    return value.tolist() if isinstance(value, np.ndarray | np.generic) else value


def _write_episodes(root: Path, rows: list[dict[str, Any]], numbers: list[int]) -> None:
    """``meta/episodes`` files, row groups of up to 10 episodes per file."""
    for number in sorted(set(numbers)):
        mine = [r for r, n in zip(rows, numbers, strict=True) if n == number]
        path = _path(root, EPISODES_PATH, number)
        writer = None
        for start in range(0, len(mine), META_ROW_GROUP):
            group = mine[start : start + META_ROW_GROUP]
            table = pa.Table.from_pydict({k: [_to_list(r[k]) for r in group] for k in group[0]})
            if writer is None:
                writer = pq.ParquetWriter(
                    path, schema=table.schema, compression="snappy", use_dictionary=True
                )
            writer.write_table(table)
        assert writer is not None
        writer.close()


def _write_tasks(root: Path, tasks: Mapping[str, int]) -> None:
    """``meta/tasks.parquet`` as ``pandas.DataFrame({"task_index": ...}, index=tasks).to_parquet``."""
    table = pa.table(
        {
            "task_index": pa.array(list(tasks.values()), pa.int64()),
            "__index_level_0__": pa.array(list(tasks), pa.large_string()),
        }
    )
    table = table.replace_schema_metadata({"pandas": json.dumps(TASKS_PANDAS_META)})
    pq.write_table(table, root / "meta" / "tasks.parquet")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """lerobot's ``write_json``: 4-space indent, no trailing newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=4, ensure_ascii=False)


# --------------------------------------------------------------------------- video


def _codec_options(codec: str) -> tuple[str, dict[str, str]]:
    """Encoder name and options: lerobot's, plus the converter's libx264 AVX-512 workaround
    (without it the same frames give different bytes from run to run)."""
    name, options = VIDEO_CODECS[codec]
    options = dict(options)
    if codec == "h264" and x264_asm_cap():
        options["x264-params"] = x264_asm_cap()
    return name, options


def _encode_episode(frames: Sequence[np.ndarray], path: Path, fps: int, codec: str) -> None:
    """Encode one episode like lerobot's ``encode_video_frames`` (RGB frames -> yuv420p)."""
    name, options = _codec_options(codec)
    height, width = frames[0].shape[:2]
    with av.open(str(path), "w") as output:
        stream = output.add_stream(name, fps, options=options)
        stream.pix_fmt = "yuv420p"
        stream.width, stream.height = width, height
        for frame in frames:
            packets = stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24"))
            if packets:
                output.mux(packets)
        packets = stream.encode()
        if packets:
            output.mux(packets)


def _video_duration(path: Path) -> float:
    """lerobot's ``get_video_duration_in_s``: ``stream.duration * time_base``."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.duration is not None:
            return float(stream.duration * stream.time_base)
        return float(Fraction(container.duration, av.time_base))


def _concat_videos(first: Path, second: Path, out: Path, tmp: Path) -> None:
    """lerobot's ``concatenate_video_files``: concat demuxer, stream copy, faststart."""
    listing = tmp / "list.ffconcat"
    listing.write_text(
        f"ffconcat version 1.0\nfile '{first.resolve()}'\nfile '{second.resolve()}'\n"
    )
    joined = tmp / "joined.mp4"
    with (
        av.open(str(listing), "r", format="concat", options={"safe": "0"}) as src,
        av.open(str(joined), "w", options={"movflags": "faststart"}) as dst,
    ):
        streams = {}
        for stream in src.streams:
            if stream.type in ("video", "audio", "subtitle"):
                streams[stream.index] = dst.add_stream_from_template(template=stream, opaque=True)
                streams[stream.index].time_base = stream.time_base
        last_dts: dict[int, int] = {}
        for packet in src.demux():
            if packet.stream.index not in streams or packet.dts is None:
                continue
            index = packet.stream.index
            if index in last_dts and packet.dts <= last_dts[index]:
                # x264 gives a 1-frame episode no B-frame delay (dts 0, not -1 frame), so the
                # next episode's first dts collides with it and lerobot's remux fails; nudge it.
                packet.dts = last_dts[index] + 1
            last_dts[index] = packet.dts
            packet.stream = streams[index]
            dst.mux(packet)
    shutil.move(joined, out)
    listing.unlink()


def _video_info(path: Path) -> dict[str, Any]:
    """lerobot's ``get_video_info`` (of ``file-000.mp4`` after episode 0)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {
            "video.height": stream.height,
            "video.width": stream.width,
            "video.codec": stream.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(Fraction(stream.base_rate)),  # PyAV 19: an AVRational, no __int__
            "video.channels": 3,
            "has_audio": len(container.streams.audio) > 0,
        }


class _VideoAppender:
    """Per camera: encode each episode, then start a new file or append to the current one."""

    def __init__(self, root: Path, key: str, fps: int, codec: str, tmp: Path):
        self.root, self.key, self.fps, self.codec, self.tmp = root, key, fps, codec, tmp
        self.number: int | None = None
        self.duration = 0.0

    def add(self, number: int, frames: Sequence[np.ndarray]) -> dict[str, Any]:
        episode_path = self.tmp / "episode.mp4"
        _encode_episode(frames, episode_path, self.fps, self.codec)
        episode_duration = _video_duration(episode_path)
        path = _path(self.root, VIDEO_PATH, number, video_key=self.key)
        if number != self.number:
            shutil.move(episode_path, path)
            self.number, self.duration = number, 0.0
        else:
            _concat_videos(path, episode_path, path, self.tmp)
            episode_path.unlink()
        start, self.duration = self.duration, self.duration + episode_duration
        chunk, file = _chunk_file(number)
        prefix = f"videos/{self.key}"
        return {
            f"{prefix}/chunk_index": chunk,
            f"{prefix}/file_index": file,
            f"{prefix}/from_timestamp": start,
            f"{prefix}/to_timestamp": self.duration,
        }


# --------------------------------------------------------------------------- dataset


def _features(
    cameras: Mapping[str, tuple[int, int]],
    state_dim: int,
    action_dim: int,
    extra: Mapping[str, str],
    image_cameras: Mapping[str, tuple[int, int]] = {},
    strings: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """info.json ``features`` in lerobot's order: cameras, state, action, extras, defaults."""
    features: dict[str, dict[str, Any]] = {}
    names = ["height", "width", "channels"]
    for key, (height, width) in cameras.items():
        if height % 2 or width % 2:
            raise ValueError(f"camera {key!r}: yuv420p needs even height and width")
        features[key] = {"dtype": "video", "shape": [height, width, 3], "names": names}
    for key, (height, width) in image_cameras.items():
        features[key] = {"dtype": "image", "shape": [height, width, 3], "names": names}
    for key, dim in (("observation.state", state_dim), ("action", action_dim)):
        names = [f"joint_{i}" for i in range(dim)]
        features[key] = {"dtype": "float32", "shape": [dim], "names": names}
    for key, dtype in extra.items():
        if dtype not in EXTRA_DTYPES:
            raise ValueError(f"extra feature {key!r}: dtype must be one of {EXTRA_DTYPES}")
        features[key] = {"dtype": dtype, "shape": [1], "names": None}
    for key in strings:
        features[key] = {"dtype": "string", "shape": [1], "names": None}
    return features | {k: dict(v) for k, v in DEFAULT_FEATURES.items()}


def string_value(key: str, episode_index: int, frame_index: int) -> str:
    """The string feature `key` of a frame: changes every 4 frames (like a subtask label)."""
    return f"{key}: step {frame_index // 4} of episode {episode_index}"


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _tabular(
    ep: _Episode,
    fps: int,
    dims: tuple[int, int],
    extra: Mapping[str, str],
    task_index: Mapping[str, int],
) -> dict[str, np.ndarray]:
    """An episode's tabular columns as lerobot's episode buffer holds them (``(frames, d)``)."""
    state, action = _state_action(ep.index, ep.length, *dims)
    frames = np.arange(ep.length)
    columns = {"observation.state": state, "action": action}
    columns |= {k: _extra_column(dt, ep.index, ep.length) for k, dt in extra.items()}
    columns |= {
        "timestamp": frames / fps,  # float64 in the buffer (stats), float32 in parquet
        "frame_index": frames,
        "episode_index": np.full(ep.length, ep.index),
        "index": ep.start + frames,
        "task_index": np.array([task_index[t] for t in ep.frame_tasks]),
    }
    return {k: v.reshape(ep.length, -1) for k, v in columns.items()}


def _per_camera(value: int | Mapping[str, int] | None, key: str) -> int | None:
    """Episodes per video file for one camera."""
    return value.get(key) if isinstance(value, Mapping) else value


def _prepare_root(root: Path) -> Path:
    """Create ``root``; refuse a non-empty one."""
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} exists and is not empty")
    root.mkdir(parents=True, exist_ok=True)
    return root


def write_lerobot_v3(
    root: Path,
    *,
    fps: int = 10,
    episode_lengths: Sequence[int] = (5, 1, 2, 12),
    episode_tasks: Sequence[str | Sequence[str]] | None = None,
    cameras: Mapping[str, tuple[int, int]] | None = None,
    video_codec: str = "h264",
    state_dim: int = 4,
    action_dim: int = 4,
    episodes_per_data_file: int | None = None,
    episodes_per_video_file: int | Mapping[str, int] | None = None,
    episodes_per_meta_file: int | None = None,
    extra_features: Mapping[str, str] | None = None,
    robot_type: str = "synthetic_arm",
    image_cameras: Mapping[str, tuple[int, int]] | None = None,
    string_features: Sequence[str] = (),
    noise: float = 0.0,
) -> Path:
    """Write a LeRobot v3.0 dataset to ``root`` (created; must be absent or empty); returns it.

    Args:
        episode_tasks: per episode a task string or a list (a multi-task episode, frames cut
            into equal consecutive parts); default alternates two tasks.
        cameras: video key -> ``(height, width)``; default one 48x64 camera; ``{}`` = tabular only.
        video_codec: ``"h264"`` (libx264, crf 30, g 2, B-frames) or ``"av1"`` (SVT-AV1, crf 30,
            g 2, preset 12), yuv420p, as lerobot encodes; or ``"h264-bframes"``,
            ``"hevc-bframes"`` (g 8, 3 B-frames; x265's open GOPs), ``"av1-hidden"`` (g 16,
            hidden alt-ref frames): reordered streams as other recorders write them.
        episodes_per_data_file / episodes_per_meta_file: start a new file every k episodes
            (``None``: one file).
        episodes_per_video_file: the same for mp4s, one value or per camera key (missing key:
            one file), so cameras can split at different episodes.
        extra_features: extra scalar columns, name -> ``"float32"`` (progress in [0, 1)),
            ``"int64"`` (``frame_state``) or ``"bool"`` (last frame), e.g. ``next.done``.
        image_cameras: LeRobot ``image`` cameras, key -> ``(height, width)``: one PNG per
            frame inside the data parquet, as lerobot stores cameras recorded without video.
        string_features: per-frame string columns (``string_value``), dtype ``"string"``.
        noise: Gaussian sensor noise on every rendered image (footage-like content).
    """
    if video_codec not in VIDEO_CODECS:
        raise ValueError(f"video_codec must be one of {sorted(VIDEO_CODECS)}, got {video_codec!r}")
    root = _prepare_root(root)
    cameras = dict(DEFAULT_CAMERAS if cameras is None else cameras)
    extra = dict(extra_features or {})
    episodes = _plan(episode_lengths, episode_tasks)
    task_index = {t: i for i, t in enumerate(dict.fromkeys(t for e in episodes for t in e.tasks))}
    images = dict(image_cameras or {})
    features = _features(cameras, state_dim, action_dim, extra, images, string_features)
    tabular = {k: ft for k, ft in features.items() if ft["dtype"] != "video"}
    if isinstance(episodes_per_video_file, Mapping) and set(episodes_per_video_file) - set(cameras):
        raise ValueError(
            f"episodes_per_video_file names unknown cameras: {episodes_per_video_file}"
        )
    data_numbers = _file_numbers(len(episodes), episodes_per_data_file)
    meta_numbers = _file_numbers(len(episodes), episodes_per_meta_file)
    video_numbers = {
        k: _file_numbers(len(episodes), _per_camera(episodes_per_video_file, k)) for k in cameras
    }
    data_writer = _DataWriter(root, tabular)
    rows: list[dict[str, Any]] = []
    total: dict[str, dict[str, np.ndarray]] = {}
    with tempfile.TemporaryDirectory(prefix="lerobot_factory_") as tmp:
        videos = {k: _VideoAppender(root, k, fps, video_codec, Path(tmp)) for k in cameras}
        for ep in episodes:
            columns = _tabular(ep, fps, (state_dim, action_dim), extra, task_index)
            for key in string_features:
                columns[key] = np.array([string_value(key, ep.index, t) for t in range(ep.length)])
            rendered = {}
            for cam, (key, (height, width)) in enumerate({**cameras, **images}.items()):
                rendered[key] = [
                    render_frame(height, width, ep.index, t, cam, noise) for t in range(ep.length)
                ]
            for key in images:
                columns[key] = [_png(frame) for frame in rendered[key]]
            data_writer.write(data_numbers[ep.index], columns, ep.index)
            data_chunk, data_file = _chunk_file(data_numbers[ep.index])
            row: dict[str, Any] = {"episode_index": ep.index, "tasks": ep.tasks}
            row |= {"length": ep.length, "data/chunk_index": data_chunk}
            row |= {"data/file_index": data_file, "dataset_from_index": ep.start}
            row["dataset_to_index"] = ep.start + ep.length
            stats: dict[str, dict[str, np.ndarray]] = {}
            for key in cameras:
                row |= videos[key].add(video_numbers[key][ep.index], rendered[key])
            for key in [*cameras, *images]:
                stats[key] = image_stats(rendered[key])
            numeric = [k for k in tabular if tabular[k]["dtype"] not in ("image", "string")]
            stats |= {k: feature_stats(columns[k]) for k in numeric}
            row |= {f"stats/{k}/{s}": v for k, st in stats.items() for s, v in st.items()}
            meta_chunk, meta_file = _chunk_file(meta_numbers[ep.index])
            row |= {"meta/episodes/chunk_index": meta_chunk, "meta/episodes/file_index": meta_file}
            rows.append(row)
            total = {k: aggregate_stats([total[k], s]) if total else s for k, s in stats.items()}
    data_writer.close()
    _write_episodes(root, rows, meta_numbers)
    _write_tasks(root, task_index)
    _write_json(root / "meta" / "stats.json", {k: _jsonable(v) for k, v in total.items()})
    for key in cameras:
        features[key]["info"] = _video_info(_path(root, VIDEO_PATH, 0, video_key=key))
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": len(episodes),
        "total_frames": sum(e.length for e in episodes),
        "total_tasks": len(task_index),
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": DATA_FILES_SIZE_IN_MB,
        "video_files_size_in_mb": VIDEO_FILES_SIZE_IN_MB,
        "fps": fps,
        "splits": {"train": f"0:{len(episodes)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cameras else None,
        "features": features,
    }
    _write_json(root / "meta" / "info.json", info)
    return root


def _jsonable(stats: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """One feature's stats as lists, as lerobot's ``write_stats`` serialises them."""
    return {k: _to_list(v) for k, v in stats.items()}
