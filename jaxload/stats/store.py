"""The stats files of a dataset: `meta/stats.json` (LeRobot's structure) and
`meta/stats_sketch.npz` (the histograms that let `merge_stats` merge quantiles), written
atomically by `write_stats` and read back by `load_stats`.

    >>> import jaxload.stats as stats
    >>> per_key = stats.load_stats("out/demo")     # written at conversion
    >>> per_key["action"].shape, sorted(per_key["action"].quantiles)
    ((4,), ['q01', 'q10', 'q50', 'q90', 'q99'])
    >>> list(stats.stats_to_json(per_key)["action"])
    ['min', 'max', 'mean', 'std', 'count', 'q01', 'q10', 'q50', 'q90', 'q99']
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from jaxload import format as fmt
from jaxload.errors import DatasetError
from jaxload.format import sealing
from jaxload.format.reader import read_info
from jaxload.format.storage import DatasetStorage, as_storage
from jaxload.stats.feature_stats import QUANTILES, FeatureStats, Grid
from jaxload.stats.stream import compute_stats

log = logging.getLogger("jaxload.stats.store")

SKETCH_PATH = "meta/stats_sketch.npz"
SKETCH_VERSION = 1


def write_stats(
    dataset_path: str | os.PathLike,
    source_stats: str | os.PathLike | bytes | Mapping[str, Any] | None = None,
) -> dict[str, FeatureStats]:
    """Computes the stats of a converted dataset and writes meta/stats.json (LeRobot's
    structure) and meta/stats_sketch.npz (histograms for merging), each atomically.

    Needs the dataset's meta/info.json, meta/episodes.parquet and shards. Image stats (per
    channel) are copied for the dataset's cameras from `source_stats`, the source's LeRobot
    stats.json: a path (skipped when the file does not exist), its bytes, or its parsed
    dict; video is never decoded. The two files' digests are then recorded in
    meta/info.json (`stats_xxh3`), which `load_stats` checks them against.

    Example (the converter, after writing the metadata, before publishing)::

        write_stats(tmp_out, source.stats_json())     # or source_root / "meta/stats.json"
    """
    root = Path(dataset_path)
    info = read_info(root)
    stats = compute_stats(root)
    source = _source_stats(source_stats)
    for cam in info.cameras:
        if cam in source:
            stats[cam] = FeatureStats.from_json(source[cam], f"source stats.json: {cam}")
    ordered = {k: stats[k] for k in [*info.cameras, *info.features] if k in stats}
    sketch = _write_sketch(root / SKETCH_PATH, ordered)
    written = stats_to_json(ordered)
    fmt.write_json_atomic(root / fmt.STATS_PATH, written)
    # info.json records what was written, so `load_stats` refuses an edited file (format 6).
    raw = json.loads((root / fmt.INFO_PATH).read_bytes())
    raw["stats_xxh3"] = {
        fmt.STATS_PATH: sealing.json_digest(json.loads(json.dumps(written))),
        SKETCH_PATH: xxhash.xxh3_64_hexdigest(sketch),
    }
    fmt.write_json_atomic(root / fmt.INFO_PATH, raw)
    return ordered


def load_stats(
    dataset_path: str | os.PathLike | DatasetStorage,
    keys: Iterable[str] | None = None,
    *,
    sketch: bool = True,
) -> dict[str, FeatureStats]:
    """meta/stats.json of a dataset (its directory, or its `DatasetStorage`: a dataset at
    a URL is read where it lives), with the histograms of meta/stats_sketch.npz attached
    (so `merge_stats` can merge quantiles) when the sketch matches the stats.

    `keys` limits the result (and any warning) to those features; one the file lacks is
    left out. `sketch=False` skips the histograms (stats.json alone: smaller, no merging
    of quantiles with bounds).

    Both files must be what the dataset was converted with (their digests in info.json's
    `stats_xxh3`), and every entry is checked where it is read: finite, std >= 0
    and the shape of its feature (`(1,)` for a scalar) or camera (`(3, 1, 1)`);
    a DatasetError names the file, the key and the field, instead of a mean or a NaN that
    would be served into every normalized batch.
    """
    storage = as_storage(dataset_path)
    path = storage.where(fmt.STATS_PATH)
    data = storage.read(fmt.STATS_PATH)
    if data is None:
        raise DatasetError(f"{path}: missing; compute it with jaxload.stats.write_stats")
    raw = _parse_json(data, path)
    info = read_info(storage)
    _check_digest(path, info, fmt.STATS_PATH, sealing.json_digest(raw))
    keys = [keys] if isinstance(keys, str) else keys
    wanted = raw.keys() if keys is None else [k for k in dict.fromkeys(keys) if k in raw]
    stats = {k: FeatureStats.from_json(raw[k], f"{path}: {k}") for k in wanted}
    for key, entry in stats.items():
        entry.check(f"{path}: {key}", _stats_shape(info, key))
    histograms = _read_sketch(storage, info) if sketch else {}
    for key, (count, grids, error) in histograms.items():
        if keys is not None and key not in stats:  # not asked for: not even a warning
            continue
        s = stats.get(key)
        if s is None or s.count != count or any(e.size != s.mean.size for e in error.values()):
            log.warning("%s: sketch of %r does not match stats.json; ignoring it", path, key)
            continue
        error = {q: e.reshape(s.shape) for q, e in error.items()}
        stats[key] = dataclasses.replace(s, grids=grids, quantile_error=error)
    return stats


def stats_to_json(stats: Mapping[str, FeatureStats]) -> dict[str, dict[str, list]]:
    """A stats mapping in LeRobot's stats.json structure."""
    return {k: s.to_json() for k, s in stats.items()}


def _source_stats(source: str | os.PathLike | bytes | Mapping[str, Any] | None) -> Mapping:
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return source
    if isinstance(source, bytes):
        try:
            raw = json.loads(source)
        except ValueError as e:
            raise DatasetError(f"source stats.json: unreadable ({e})") from e
        if not isinstance(raw, dict):
            raise DatasetError("source stats.json: expected a JSON object per feature")
        return raw
    path = Path(source)
    return _read_json(path) if path.is_file() else {}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DatasetError(f"{path}: unreadable ({e})") from e
    return _parse_json(data, str(path))


def _parse_json(data: bytes, path: str) -> dict[str, Any]:
    try:
        raw = json.loads(data)
    except ValueError as e:
        raise DatasetError(f"{path}: unreadable ({e})") from e
    if not isinstance(raw, dict):
        raise DatasetError(f"{path}: expected a JSON object per feature")
    return raw


def _write_sketch(path: Path, stats: Mapping[str, FeatureStats]) -> bytes:
    arrays: dict[str, np.ndarray] = {"version": np.array(SKETCH_VERSION)}
    for key, s in stats.items():
        if not s.grids:
            continue
        arrays[f"{key}/count"] = np.array(s.count)
        for q, e in (s.quantile_error or {}).items():
            arrays[f"{key}/error/{q}"] = np.asarray(e).reshape(-1)
        for i, g in enumerate(s.grids):
            arrays |= {f"{key}/{i}/edges": g.edges, f"{key}/{i}/counts": g.counts}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    fmt.write_bytes_atomic(path, buffer.getvalue())
    return buffer.getvalue()


def _stats_shape(info: Any, key: str) -> tuple[int, ...] | None:
    """The shape a key's stats have (LeRobot's): a camera's (3, 1, 1), a feature's shape
    with `(1,)` for a scalar; None for a key the dataset does not have."""
    if key in info.cameras:
        return (3, 1, 1)
    feature = info.features.get(key)
    return None if feature is None else (tuple(feature.shape) or (1,))


def _check_digest(path: str, info: Any, name: str, actual: str) -> None:
    expected = (info.stats_xxh3 or {}).get(name)
    if expected != actual:
        raise DatasetError(
            f"{path}: not the statistics this dataset was converted with (its digest differs "
            f"from meta/info.json's stats_xxh3): {name} was edited or replaced after "
            "conversion; restore it, or reconvert (`jaxload convert SRC OUT`)"
        )


def _read_sketch(
    storage: DatasetStorage, info: Any
) -> dict[str, tuple[int, tuple[Grid, ...], dict[str, np.ndarray]]]:
    path = storage.where(SKETCH_PATH)
    data = storage.read(SKETCH_PATH)
    if data is None:
        return {}
    _check_digest(path, info, SKETCH_PATH, xxhash.xxh3_64_hexdigest(data))
    try:
        with np.load(io.BytesIO(data)) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        log.warning("%s: unreadable (%s); merged quantiles will be approximate", path, e)
        return {}
    if int(arrays.pop("version", -1)) != SKETCH_VERSION:
        log.warning("%s: unknown sketch version; ignoring it", path)
        return {}
    out = {}
    for name in (k[: -len("/count")] for k in arrays if k.endswith("/count")):
        grids, i = [], 0
        while f"{name}/{i}/edges" in arrays:
            grids.append(Grid(arrays[f"{name}/{i}/edges"], arrays[f"{name}/{i}/counts"]))
            i += 1
        error = {q: arrays[f"{name}/error/{q}"] for q in QUANTILES if f"{name}/error/{q}" in arrays}
        out[name] = (int(arrays[f"{name}/count"]), tuple(grids), error)
    return out
