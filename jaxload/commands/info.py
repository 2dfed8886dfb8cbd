"""jaxload info PATH: what is in a LeRobot source or a jaxload dataset."""

import argparse
import json
from pathlib import Path

NAME = "info"
HELP = "what is in a dataset"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path")
    parser.add_argument("--json", action="store_true", help="print the metadata as JSON")


def run(args: argparse.Namespace) -> int:
    from jaxload.tools.doctor import is_jaxload_dataset

    if is_jaxload_dataset(args.path):
        return _dataset_info(args)
    return _source_info(args)


def _source_info(args: argparse.Namespace) -> int:
    from jaxload.converters.sources import open_files, open_source

    source = open_source(open_files(args.path))
    if args.json:
        print(json.dumps(source.info, indent=2))
        return 0
    print(f"{args.path}: LeRobot {source.info['codebase_version']} dataset")
    print(
        f"  fps {source.fps}, {source.num_episodes} episodes, "
        f"{source.info['total_frames']} frames, {len(source.tasks)} tasks"
    )
    for key, feature in source.features.items():
        print(f"  {key}: {feature['dtype']} {feature['shape']}")
    return 0


def _dataset_info(args: argparse.Namespace) -> int:
    from jaxload import format as fmt

    info = fmt.read_info(args.path)
    if args.json:
        print(json.dumps(info.to_json(), indent=2))
        return 0
    size = sum(f.stat().st_size for f in Path(args.path).rglob("*") if f.is_file())
    print(f"{args.path}: jaxload dataset, format version {fmt.FORMAT_VERSION}")
    print(
        f"  fps {info.fps}, {info.total_episodes} episodes, {info.total_frames} frames, "
        f"{info.num_shards} shard(s), {size / 2**20:.2f} MB"
    )
    print(f"  source: {info.source}")
    for key, feature in info.features.items():
        print(f"  {key}: {feature.dtype} {list(feature.shape)}")
    fidelity = info.converter.get("fidelity_psnr_db", {})
    for key, cam in info.cameras.items():
        psnr = fidelity.get(key, {})
        print(
            f"  {key}: video {cam.codec} {cam.height}x{cam.width} gop {cam.gop} crf {cam.crf} "
            f"(from {cam.source_codec}; PSNR min {psnr.get('min')} mean {psnr.get('mean')} dB)"
        )
    print(f"  fingerprint {info.fingerprint}")
    return 0
