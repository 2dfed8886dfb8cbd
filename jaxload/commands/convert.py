"""jaxload convert SRC OUT: a LeRobot dataset (v3.0 or v2.1; a directory, a hub dataset id
or an fsspec URL) in, a jaxload dataset out. Rerunning the same command after a crash
resumes it; docs/CONVERT.md has the details."""

import argparse
import contextlib
import errno
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from jaxload.errors import JaxloadError

NAME = "convert"
HELP = "convert a LeRobot dataset (directory, hub id or URL; v3.0 or v2.1) into a jaxload dataset"
# What a rerun does after Ctrl-C (printed by jaxload.cli) or a full disk.
INTERRUPTED = "rerun the same command to resume: the episodes already converted are kept"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "src",
        help="LeRobot dataset: a directory, a hub dataset id (lerobot/pusht) or an fsspec "
        "URL (hf://, gs://, s3://, file://)",
    )
    parser.add_argument("out", help="output directory (must not exist, or be empty)")
    parser.add_argument("--repo-id", help="recorded in the metadata as the source's hub repo id")
    parser.add_argument("--revision", help="hub branch, tag or commit (hub ids only; default main)")
    parser.add_argument(
        "--video-codec",
        choices=["h264", "hevc", "lossless", "copy"],
        default="h264",
        help="h264 (default) or hevc: re-encode at --crf; lossless: exact pixels (x264 RGB, "
        "qp 0; several times larger, CPU decode only); copy: keep an h264/hevc source stream "
        "(image cameras are then stored lossless)",
    )
    parser.add_argument("--gop", type=int, default=None, help="frames per GOP (default 4)")
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
    parser.add_argument("--engine", choices=["local", "ray"], default="local")
    parser.add_argument(
        "--ray-address",
        help='Ray cluster to join ("auto" on a cluster node; default: RAY_ADDRESS or a local Ray)',
    )
    parser.add_argument("--episodes", help='episodes to convert, e.g. "0-9,12"')
    parser.add_argument(
        "--shard-mb", type=float, default=None, help="output shard size in MiB (default 256)"
    )
    parser.add_argument(
        "--cache-dir",
        help="keep downloaded source files here (default: a cache inside OUT's partial "
        "directory, emptied as the conversion goes)",
    )
    parser.add_argument(
        "--retries", type=int, default=None, help="attempts per remote read (default 6)"
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="discard an interrupted conversion into OUT made with other arguments",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from jaxload.converters.convert import DEFAULT_GOP, convert
    from jaxload.converters.remote import RetryPolicy
    from jaxload.converters.writer import DEFAULT_SHARD_BYTES

    logging.basicConfig(stream=sys.stderr, format="jaxload convert: %(message)s")
    retry = None
    if args.retries is not None:
        if args.retries < 1:
            print("jaxload convert: error: --retries must be at least 1", file=sys.stderr)
            return 2
        retry = RetryPolicy(attempts=args.retries)
    shard_bytes = DEFAULT_SHARD_BYTES if args.shard_mb is None else int(args.shard_mb * 2**20)
    check_out(Path(args.out))
    with storage_errors(args.out):
        report = convert(
            args.src,
            args.out,
            video_codec=args.video_codec,
            gop=args.gop or DEFAULT_GOP,
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
        )
    print(report.summary())
    return 0


def check_out(out: Path) -> None:
    """OUT must be a directory to be (an existing file, even empty, is not "not empty"),
    and not under a file."""
    if out.exists() and not out.is_dir():
        raise JaxloadError(
            f"{out}: is a file, not a directory; nothing was written. Give a new directory, "
            "or an empty one, as OUT"
        )
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise JaxloadError(
                    f"{out}: cannot be created under {parent}, a file; nothing was written"
                )
            return


@contextlib.contextmanager
def storage_errors(out: str) -> Iterator[None]:
    """Turns a full disk or an unwritable OUT (raised by Python, pyarrow or ArrayRecord, in
    this process or a worker) into a JaxloadError that says what a rerun does."""
    try:
        yield
    except Exception as e:
        message = _storage_message(e, out)
        if message is None:
            raise
        raise JaxloadError(message) from e


def _storage_message(error: BaseException, out: str) -> str | None:
    for e in _chain(error):
        code, text = getattr(e, "errno", None), str(e)
        if code in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in text:
            return f"no space left on device ({text}). Free some space, then {INTERRUPTED}"
        if code == errno.EROFS or "Read-only file system" in text:
            return f"{out}: read-only file system ({text}). Once it is writable, {INTERRUPTED}"
        if code in (errno.EACCES, errno.EPERM):
            return f"permission denied ({text}). Fix the permissions, then {INTERRUPTED}"
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error and its causes (a worker's error arrives as the cause of another)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__
