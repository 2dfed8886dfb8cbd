"""jaxload info PATH: what is in a LeRobot source or a jaxload dataset.

Examples:
    jaxload info out/pusht          # episodes, features, cameras, fidelity, stats
    jaxload info lerobot/pusht      # a LeRobot source: a directory, hub id or URL
    jaxload info out/pusht --json   # meta/info.json as it is
    jaxload info out/pusht --show   # and a picture of 6 samples: sheet.png (jaxload show)
    jaxload info s3://bucket/pusht --storage-option endpoint_url=http://minio:9000
                                    # a jaxload dataset in object storage (its meta/ only)
"""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any

from jaxload.errors import JaxloadError
from jaxload.tools.dataset_path import add_storage_option

NAME = "info"
HELP = "what is in a dataset (a jaxload dataset, or a LeRobot source before conversion)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help="a jaxload dataset: a directory or a URL (s3://, gs://, hf://, https://); or a "
        "LeRobot source: a directory, a hub dataset id (lerobot/pusht) or an fsspec URL",
    )
    parser.add_argument("--json", action="store_true", help="print the metadata as JSON")
    parser.add_argument(
        "--show",
        nargs="?",
        const="sheet.png",
        metavar="PNG",
        help="also draw samples of a jaxload dataset to PNG (default sheet.png), as "
        "`jaxload show PATH --out PNG` does (its options: jaxload show --help)",
    )
    add_storage_option(parser, "PATH a URL")


def run(args: argparse.Namespace) -> int:
    from jaxload.tools.dataset_path import (
        JAXLOAD,
        dataset_kind,
        refuse_options_for_local,
        storage_options_of,
    )

    options = storage_options_of(args)
    refuse_options_for_local(args.path, options)
    kind = dataset_kind(args.path, options)
    if args.show is not None and (args.json or kind != JAXLOAD):
        why = "--json prints metadata only" if args.json else "convert it first: jaxload convert"
        raise JaxloadError(f"{args.path}: --show draws a jaxload dataset's samples; {why}")
    if kind == JAXLOAD:
        return _dataset_info(args, options)
    return _source_info(args, options)


def _source_info(args: argparse.Namespace, options: dict[str, Any] | None) -> int:
    from jaxload.converters.sources import open_files, open_source

    # A remote source's files are fetched into a cache; only meta/ is read here.
    with tempfile.TemporaryDirectory(prefix="jaxload-info-") as cache:
        files = open_files(args.path, cache_dir=cache, storage_options=options)
        return _print_source(args, open_source(files))


def _print_source(args: argparse.Namespace, source: Any) -> int:
    if args.json:
        print(json.dumps(source.info, indent=2))
        return 0
    print(f"{args.path}: LeRobot {source.info['codebase_version']} dataset (not converted)")
    print(
        f"  fps {source.fps}, {source.num_episodes} episodes, "
        f"{source.info['total_frames']} frames, {len(source.tasks)} tasks"
    )
    for key, feature in source.features.items():
        print(f"  {key}: {feature['dtype']} {list(feature['shape'])}")
    print(f"  to load it with jaxload, convert it first: jaxload convert {args.path} OUT")
    return 0


def _dataset_info(args: argparse.Namespace, options: dict[str, Any] | None) -> int:
    from jaxload import format as fmt
    from jaxload.format.reader import read_tasks
    from jaxload.tools.dataset_path import locate

    where = locate(args.path, options)
    info = fmt.read_info(where.storage)
    if args.json:
        print(json.dumps(info.to_json(), indent=2))
        return 0
    tasks = len(read_tasks(where.storage))
    stats = _stats_section(args.path, where.storage)
    size = where.total_bytes()
    shards = f"{info.num_shards} shard{'s' if info.num_shards != 1 else ''}"
    print(f"{args.path}: jaxload dataset, format version {info.format_version}")
    print(
        f"  {info.total_episodes} episodes, {info.total_frames} frames at {info.fps} fps, "
        f"{tasks} tasks; {shards}, {size / 2**20:.2f} MiB"
    )
    print(f"  source: {_source(info.source)}")
    print("  features:")
    for key, feature in info.features.items():
        print(f"    {key}: {feature.dtype} {list(feature.shape) or 'scalar'}")
    if info.cameras:
        print("  cameras:")
        fidelity = info.converter.get("fidelity_psnr_db", {})
        sources = info.converter.get("camera_source_sizes") or {}
        flag = _resize_flag(info.converter)
        for key, cam in info.cameras.items():
            print(f"    {key}: {_camera(cam, fidelity.get(key))}")
            source = sources.get(key)
            if source is not None and list(source) != [cam.height, cam.width]:
                print(
                    f"      resized from {source[0]}x{source[1]} ({flag}); PSNR vs the resized source"
                )
    print(*stats, sep="\n")
    print(f"  fingerprint {info.fingerprint}")
    if args.show is None:
        print(f"  a picture of its samples: jaxload show {args.path} (or info --show)")
        return 0
    from jaxload.commands import show

    loader = show.make_loader([args.path], samples=show.DEFAULT_SAMPLES, seed=0, windows=None,
                              resize=None, storage_options=options)  # fmt: skip
    return show.write_sheet(loader, args.show, show.DEFAULT_SAMPLES)


def _source(source: dict[str, Any]) -> str:
    """'LeRobot v3.0, hub lerobot/pusht @ 1a2b3c4d5e6f, robot so100' from info.json's source."""
    parts = [f"LeRobot {source['codebase_version']}" if "codebase_version" in source else ""]
    if source.get("repo_id"):
        revision = source.get("revision")
        parts.append(f"hub {source['repo_id']}" + (f" @ {revision[:12]}" if revision else ""))
    if source.get("robot_type"):
        parts.append(f"robot {source['robot_type']}")
    known = {"format", "codebase_version", "repo_id", "revision", "robot_type"}
    parts += [f"{k} {v}" for k, v in source.items() if k not in known and v is not None]
    return ", ".join(p for p in parts if p) or "unknown"


def _camera(cam: Any, psnr: dict[str, float] | None) -> str:
    """A camera's line: its codec and size, and whether its frames are exact (the source's
    stream copied, or a lossless re-encode) or re-encoded at what fidelity."""
    if cam.gop is None and cam.codec == cam.source_codec:  # copied (docs/CONVERT.md)
        return (
            f"video {cam.codec} {cam.height}x{cam.width}, GOPs of the source; exact: the "
            "source stream copied, frames bit-identical to its decode"
        )
    gop = f"gop {cam.gop}" if cam.gop is not None else "variable gop"
    crf = f", crf {cam.crf}" if cam.crf is not None else ""
    text = f"video {cam.codec} {cam.height}x{cam.width}, {gop}{crf} (from {cam.source_codec})"
    if psnr and psnr.get("min") is not None:
        text += f"; re-encoded: PSNR vs source min {psnr['min']:.2f} dB, mean {psnr['mean']:.2f} dB"
    elif psnr is not None:
        text += "; exact: a lossless re-encode, every frame identical to the source"
    return text


def _resize_flag(converter: dict[str, Any]) -> str:
    if converter.get("resize"):
        return f"--resize {converter['resize']}"
    return f"--max-size {converter.get('max_size')}"


def _stats_section(path: str, storage: Any) -> list[str]:
    """A compact stats block; `jaxload stats PATH` has every dimension (`storage`: where
    PATH's files are)."""
    from jaxload.commands import stats
    from jaxload.errors import JaxloadError

    try:
        per_key = stats.load(storage)
    except JaxloadError as e:
        return [f"  stats: none ({e})"]
    lines = [f"  stats (every dimension: jaxload stats {path}):"]
    return lines + [f"    {line}" for line in stats.compact_lines(per_key)]
