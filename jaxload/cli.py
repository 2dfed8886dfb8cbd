"""The `jaxload` command line: convert, doctor, info."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from jaxload.errors import JaxloadError


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except JaxloadError as e:
        print(f"jaxload {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"jaxload {args.command}: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxload", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("convert", help="convert a LeRobot v3.0 dataset into a jaxload dataset")
    p.add_argument("src", help="LeRobot dataset directory")
    p.add_argument("out", help="output directory (must not exist, or be empty)")
    p.add_argument("--repo-id", help="recorded in the metadata as the source's hub repo id")
    p.add_argument("--video-codec", choices=["h264", "hevc", "copy"], default="h264")
    p.add_argument("--gop", type=int, default=None, help="frames per GOP (default 8)")
    p.add_argument("--crf", type=int, default=None, help="x264/x265 crf (default 14)")
    p.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    p.add_argument("--engine", choices=["local"], default="local")
    p.add_argument("--episodes", help='episodes to convert, e.g. "0-9,12"')
    p.set_defaults(run=_convert)

    p = sub.add_parser("doctor", help="check a LeRobot source or a jaxload dataset")
    p.add_argument("path")
    p.set_defaults(run=_doctor)

    p = sub.add_parser("info", help="what is in a dataset")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")
    p.set_defaults(run=_info)
    return parser


def _convert(args: argparse.Namespace) -> int:
    from converters.convert import DEFAULT_CRF, DEFAULT_GOP, convert

    report = convert(
        args.src,
        args.out,
        video_codec=args.video_codec,
        gop=args.gop or DEFAULT_GOP,
        crf=DEFAULT_CRF if args.crf is None else args.crf,
        workers=args.workers,
        episodes=args.episodes,
        repo_id=args.repo_id,
    )
    print(report.summary())
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from jaxload.doctor import check_dataset, is_jaxload_dataset

    if is_jaxload_dataset(args.path):
        kind, results = "jaxload dataset", check_dataset(args.path)
    else:
        from converters.doctor import check_source

        kind, results = "LeRobot source", check_source(args.path)
    print(f"{args.path} ({kind})")
    for result in results:
        print(result.line())
    failed = sum(r.status == "FAIL" for r in results)
    print(f"{failed} failed, {sum(r.status == 'ok' for r in results)} passed")
    return failed


def _info(args: argparse.Namespace) -> int:
    from jaxload import format as fmt
    from jaxload.doctor import is_jaxload_dataset

    if not is_jaxload_dataset(args.path):
        from converters.lerobot_v3 import LeRobotV3Source

        source = LeRobotV3Source(args.path)
        print(f"{args.path}: LeRobot {source.info['codebase_version']} dataset")
        print(
            f"  fps {source.fps}, {source.num_episodes} episodes, "
            f"{source.info['total_frames']} frames, {len(source.tasks)} tasks"
        )
        for key, feature in source.features.items():
            print(f"  {key}: {feature['dtype']} {feature['shape']}")
        return 0
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


if __name__ == "__main__":
    sys.exit(main())
