"""jaxload stats PATH: the normalization stats of a jaxload dataset (meta/stats.json).

Examples:
    jaxload stats out/pusht                       # a table per feature, one row per dimension
    jaxload stats out/pusht --key action --json   # LeRobot's stats.json structure
    jaxload stats out/pusht --out stats.json      # the same JSON, written atomically
    jaxload stats gs://bucket/pusht               # a dataset in object storage (its meta/)

`jaxload info` shows a compact form of the same numbers (`compact_lines`).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

from jaxload.tools.dataset_path import add_storage_option

NAME = "stats"
HELP = "normalization stats of a jaxload dataset (mean, std, min, max, q01, q99 per key)"
COLUMNS = ("mean", "std", "min", "max", "q01", "q99")
RGB = ("R", "G", "B")  # LeRobot's image stats: one value per channel, in RGB order


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help="jaxload dataset (made by `jaxload convert`): a directory or a URL (s3://, gs://, "
        "hf://, https://)",
    )
    parser.add_argument(
        "--key",
        action="append",
        help="only this feature or camera (repeat for several; default: every key)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print LeRobot's stats.json structure instead"
    )
    parser.add_argument(
        "--out", metavar="FILE", help="write the stats as JSON to FILE (atomically)"
    )
    add_storage_option(parser, "PATH a URL")


def run(args: argparse.Namespace) -> int:
    from jaxload import format as fmt
    from jaxload.stats import stats_to_json
    from jaxload.tools.dataset_path import locate, storage_options_of

    where = locate(args.path, storage_options_of(args))
    info = fmt.read_info(where.storage)  # names a LeRobot directory or a missing dataset
    stats = load(where.storage, args.key)
    if args.out:
        fmt.write_json_atomic(args.out, stats_to_json(stats))
    if args.json:
        print(json.dumps(stats_to_json(stats), indent=2))
    elif args.out:
        print(f"{args.path}: stats of {len(stats)} key(s) written to {args.out}")
    else:
        print("\n".join(table_lines(args.path, info, stats)))
    return 0


def load(where: Any, keys: list[str] | None = None) -> dict[str, Any]:
    """The stats per key of the dataset at `where` (a path or its DatasetStorage); a
    DatasetError naming any asked-for key it lacks."""
    from jaxload.errors import DatasetError
    from jaxload.format.storage import as_storage
    from jaxload.stats import load_stats

    storage = as_storage(where)
    stats = load_stats(storage, keys, sketch=False)
    unknown = [k for k in keys or () if k not in stats]
    if unknown:
        have = ", ".join(load_stats(storage, sketch=False))
        raise DatasetError(
            f"{storage.name}: no stats for {', '.join(map(repr, unknown))} (has: {have})"
        )
    return stats


def table_lines(path: str | os.PathLike, info: Any, stats: dict[str, Any]) -> list[str]:
    """A table per key: one row per dimension (per channel for cameras)."""
    frames = max((s.count for s in stats.values()), default=0)
    lines = [f"{path}: normalization stats (meta/stats.json), {frames} frames"]
    for key, s in stats.items():
        lines += ["", f"{key}  {_kind(info, key, s)}, count {s.count}"]
        labels = _labels(info, key, s.shape)
        width = max(5, *(len(label) for label in labels))
        lines.append(f"  {'dim':<{width}}" + "".join(f"{c:>12}" for c in COLUMNS))
        values = {c: _values(s, c) for c in COLUMNS}
        for i, label in enumerate(labels):
            cells = "".join(_cell(values[c], i) for c in COLUMNS)
            lines.append(f"  {label:<{width}}{cells}")
    return lines


def compact_lines(stats: dict[str, Any]) -> list[str]:
    """One line per key for `jaxload info`: the extremes, and the range over dimensions
    of mean and std."""
    lines = []
    for key, s in stats.items():
        shape = list(s.shape)
        lines.append(
            f"{key} {shape}: min {_g(np.min(s.min))}, max {_g(np.max(s.max))}, "
            f"mean {_span(s.mean)}, std {_span(s.std)}"
        )
    return lines


def _kind(info: Any, key: str, s: Any) -> str:
    if key in info.cameras:
        cam = info.cameras[key]
        return f"camera {cam.height}x{cam.width}, per channel"
    feature = info.features.get(key)
    return f"{feature.dtype} {list(feature.shape)}" if feature else str(list(s.shape))


def _labels(info: Any, key: str, shape: tuple[int, ...]) -> list[str]:
    size = int(np.prod(shape))
    if key in info.cameras and size == len(RGB):
        return list(RGB)
    feature = info.features.get(key)
    names = getattr(feature, "names", None)
    if isinstance(names, dict) and len(names) == 1:  # LeRobot's {"motors": [...]} form
        names = next(iter(names.values()))
    if isinstance(names, list) and len(names) == size and all(isinstance(n, str) for n in names):
        return [f"{i} {n}" for i, n in enumerate(names)]
    return [",".join(map(str, ix)) or "0" for ix in np.ndindex(*shape)]


def _values(s: Any, column: str) -> np.ndarray | None:
    if column.startswith("q") and column not in s.quantiles:
        return None  # stats copied from a source without quantiles
    return np.asarray(s.get(column), dtype=np.float64).reshape(-1)


def _cell(values: np.ndarray | None, i: int) -> str:
    return f"{'-' if values is None else _g(values[i]):>12}"


def _g(value: float, digits: int = 6) -> str:
    return f"{float(value):.{digits}g}"


def _span(values: np.ndarray) -> str:
    """The range over dimensions, 5 significant digits."""
    lo, hi = float(np.min(values)), float(np.max(values))
    return _g(lo, 5) if lo == hi else f"{_g(lo, 5)}..{_g(hi, 5)}"
