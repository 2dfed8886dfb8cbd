"""jaxload convert SRC OUT: a LeRobot dataset (v3.0 or v2.1; a directory, a hub dataset id
or an fsspec URL) in, a jaxload dataset out. Rerunning the same command after a crash
resumes it; docs/CONVERT.md has the details."""

import argparse
import logging
import sys

# What a rerun does after Ctrl-C (printed by jaxload.cli) or a full disk.
from jaxload.converters.storage import INTERRUPTED
from jaxload.tools.dataset_path import add_storage_option, storage_options_of

NAME = "convert"
HELP = "convert a LeRobot dataset (directory, hub id or URL; v3.0 or v2.1) into a jaxload dataset"
__all__ = ["HELP", "INTERRUPTED", "NAME", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "src",
        help="LeRobot dataset: a directory, a hub dataset id (lerobot/pusht) or an fsspec "
        "URL (hf://, gs://, s3://, file://)",
    )
    parser.add_argument(
        "out",
        help="output directory (must not exist, or be empty), or an object-storage URL "
        "(s3://, gs://, hf://; must hold no objects): converted locally, then uploaded with "
        "meta/info.json last",
    )
    parser.add_argument("--repo-id", help="recorded in the metadata as the source's hub repo id")
    parser.add_argument("--revision", help="hub branch, tag or commit (hub ids only; default main)")
    parser.add_argument(
        "--video-codec",
        choices=["auto", "copy", "h264", "hevc", "lossless"],
        default=None,
        help="auto (default): keep the source's h264/hevc/av1 stream bit for bit, so frames "
        "are exactly LeRobotDataset's (cameras of other codecs re-encoded to h264; image "
        "cameras lossless); copy: the same, an error for a camera that cannot be copied; "
        "h264 or hevc: re-encode at --crf (a second lossy generation; the summary prints its "
        "PSNR); lossless: exact pixels of a re-encode (x264 RGB, qp 0; larger, CPU decode "
        "only). --crf, --min-psnr, --resize or --max-size alone choose h264",
    )
    parser.add_argument(
        "--resize",
        metavar="HxW",
        help="store every camera at HEIGHTxWIDTH pixels (e.g. 224x224): less to store and to "
        "decode; fidelity is then measured against the resized source",
    )
    parser.add_argument(
        "--max-size",
        type=int,
        default=None,
        metavar="N",
        help="instead of --resize: shrink cameras whose longer side exceeds N pixels to N, "
        "keeping the aspect ratio",
    )
    parser.add_argument(
        "--gop",
        type=int,
        default=None,
        help="frames per GOP of a re-encode (default 4; alone, it chooses h264)",
    )
    parser.add_argument(
        "--crf",
        type=int,
        default=None,
        help="x264/x265 crf (default 14; image cameras default to a 40 dB --min-psnr)",
    )
    parser.add_argument(
        "--min-psnr",
        type=float,
        default=None,
        help="instead of --crf: the PSNR (dB) every stored frame must reach; the largest crf "
        "meeting it on a sample is chosen per camera",
    )
    parser.add_argument(
        "--tune",
        choices=["fastdecode", "none"],
        default=None,
        help="x264 tune (h264 default: fastdecode, 2.3x faster decode for ~19%% more bytes)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes, or Ray CPUs (default: cores)"
    )
    parser.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local: a process pool on this machine (default); ray: Ray tasks, on a cluster "
        "with --ray-address (output bytes are the same)",
    )
    parser.add_argument(
        "--ray-address",
        help='Ray cluster to join ("auto" on a cluster node; default: RAY_ADDRESS or a local Ray)',
    )
    parser.add_argument(
        "--episodes", help='episodes to convert, inclusive ranges, e.g. "0-9,12" (default: all)'
    )
    parser.add_argument(
        "--shard-mb", type=float, default=None, help="output shard size in MiB (default 256)"
    )
    parser.add_argument(
        "--cache-dir",
        help="keep downloaded source files here (default: a cache inside OUT's partial "
        "directory, emptied as the conversion goes)",
    )
    parser.add_argument(
        "--retries", type=int, default=None, help="attempts per remote read or upload (default 6)"
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="discard an interrupted conversion into OUT made with other arguments",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--work-dir",
        help="URL OUT only: where the dataset is staged before its upload (default "
        "~/.cache/jaxload/convert); a rerun resumes from there",
    )
    parser.add_argument(
        "--keep-local",
        action="store_true",
        help="URL OUT only: keep the staged local copy after the upload (default: removed)",
    )
    add_storage_option(parser, "URL OUT only")


def run(args: argparse.Namespace) -> int:
    from jaxload.converters.convert import convert
    from jaxload.converters.writer import DEFAULT_SHARD_BYTES
    from jaxload.storage.retry import RetryPolicy

    logging.basicConfig(stream=sys.stderr, format="jaxload convert: %(message)s")
    retry = None
    if args.retries is not None:
        if args.retries < 1:
            print("jaxload convert: error: --retries must be at least 1", file=sys.stderr)
            return 2
        retry = RetryPolicy(attempts=args.retries)
    shard_bytes = DEFAULT_SHARD_BYTES if args.shard_mb is None else int(args.shard_mb * 2**20)
    report = convert(
        args.src,
        args.out,
        video_codec=args.video_codec,
        gop=args.gop,
        crf=args.crf,
        tune={"none": "", None: None}.get(args.tune, args.tune),
        min_psnr=args.min_psnr,
        workers=args.workers,
        engine=args.engine,
        episodes=args.episodes,
        repo_id=args.repo_id,
        revision=args.revision,
        shard_bytes=shard_bytes,
        progress=not args.no_progress,
        cache_dir=args.cache_dir,
        retry=retry,
        restart=args.restart,
        ray_address=args.ray_address,
        work_dir=args.work_dir,
        keep_local=args.keep_local,
        storage_options=storage_options_of(args),
        resize=args.resize,
        max_size=args.max_size,
    )
    print(report.summary())
    return 0
