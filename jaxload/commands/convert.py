"""jaxload convert SRC OUT: a LeRobot dataset in, a jaxload dataset out."""

import argparse

NAME = "convert"
HELP = "convert a LeRobot v3.0 dataset into a jaxload dataset"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="LeRobot dataset directory")
    parser.add_argument("out", help="output directory (must not exist, or be empty)")
    parser.add_argument("--repo-id", help="recorded in the metadata as the source's hub repo id")
    parser.add_argument("--video-codec", choices=["h264", "hevc", "copy"], default="h264")
    parser.add_argument("--gop", type=int, default=None, help="frames per GOP (default 8)")
    parser.add_argument("--crf", type=int, default=None, help="x264/x265 crf (default 14)")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: cores)")
    parser.add_argument("--engine", choices=["local"], default="local")
    parser.add_argument("--episodes", help='episodes to convert, e.g. "0-9,12"')


def run(args: argparse.Namespace) -> int:
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
