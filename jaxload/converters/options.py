"""The conversion options, checked: codec, GOP, crf or fidelity target, tune, workers,
episode selection. Every bad value is a JaxloadError naming the flag and the rule."""

from __future__ import annotations

from typing import Any

from jaxload.converters import video
from jaxload.errors import JaxloadError, SourceError

# Decode time vs size (benchmarks/RESULTS.md, GOP tables): 8 -> 4 makes batched reads 14%
# cheaper per sample at 96x128 for 23% more bytes (12% for 51% more at 480x640); 4 -> 2
# costs 41-64% more bytes for 4-14%.
DEFAULT_GOP = 4
DEFAULT_CRF = 14  # lowest PSNR >= 38 dB vs the AV1 source on the fixtures (docs/FORMAT.md)
# x264 tune: random frames decode 2.3x faster than with none, for 19% more bytes (docs/FORMAT.md)
DEFAULT_TUNE = "fastdecode"


# The largest frame --resize accepts: H.264/HEVC level 6.2 (8192x4320: 139,264 macroblocks);
# 100000x100000 failed deep in the encoder ("ArgumentError 22").
MAX_SIDE, MAX_PIXELS = 8192, 139_264 * 256


def encode_options(
    codec: str | None,
    gop: int | None,
    crf: int | None,
    tune: str | None,
    min_psnr: float | None,
    resize: str | tuple[int, int] | None = None,
    max_size: int | None = None,
) -> video.EncodeOptions:
    if codec is None:  # the default: exact frames, unless a re-encode option was given
        asked = (gop, crf, tune, min_psnr, resize, max_size)
        codec = "auto" if all(x is None for x in asked) else "h264"
    gop = DEFAULT_GOP if gop is None else gop
    if codec not in (*video.CODECS, "copy", "auto"):
        raise JaxloadError(f"--video-codec {codec!r}: choose auto, copy, h264, hevc or lossless")
    size = parse_resize(resize, max_size, codec)
    if crf is not None and min_psnr is not None:
        raise JaxloadError("--crf and --min-psnr: give one (a crf, or a fidelity target)")
    image_min_psnr = video.DEFAULT_IMAGE_MIN_PSNR if crf is None and min_psnr is None else None
    crf = DEFAULT_CRF if crf is None else crf
    if min_psnr is not None and codec not in ("h264", "hevc"):
        raise JaxloadError(
            f"--min-psnr with --video-codec {codec}: a fidelity target needs h264 or hevc "
            "(lossless is exact, copy keeps the source)"
        )
    if min_psnr is not None and not (isinstance(min_psnr, int | float) and 20 <= min_psnr <= 80):
        raise JaxloadError(f"--min-psnr {min_psnr!r}: must be a number of dB within 20..80")
    if gop < 1:
        raise JaxloadError(f"--gop {gop}: must be at least 1")
    if not 0 <= crf <= 51:
        raise JaxloadError(f"--crf {crf}: must be within 0..51")
    if tune is None:
        tune = DEFAULT_TUNE if codec in ("h264", "lossless", "auto") else ""
    if tune not in ("", "fastdecode"):
        raise JaxloadError(f"--tune {tune!r}: choose fastdecode or none")
    if tune and codec not in ("h264", "lossless", "auto"):
        # x265's fastdecode packets, cut into GOP records, fail to decode (FFmpeg's hevc
        # decoder: "Invalid data found when processing input"); not investigated further.
        raise JaxloadError(f"--tune {tune} is for --video-codec h264 or lossless only")
    return video.EncodeOptions(
        codec=codec,
        gop=gop,
        crf=crf,
        tune=tune,
        min_psnr=None if min_psnr is None else float(min_psnr),
        image_min_psnr=image_min_psnr,
        resize=size,
        # Stored sizes are even (4:2:0 chroma, and the resize rounds to even): the largest
        # even bound <= N keeps the promise "longer side <= N" (83 stored 84x84 before).
        max_size=None if max_size is None else int(max_size) - int(max_size) % 2,
    )


def parse_resize(
    resize: str | tuple[int, int] | None, max_size: int | None, codec: str
) -> tuple[int, int] | None:
    """--resize "HxW" as (height, width), checked with --max-size and --video-codec."""
    if resize is not None and max_size is not None:
        raise JaxloadError("--resize and --max-size: give one (an exact size, or a bound)")
    if (resize is not None or max_size is not None) and codec in ("copy", "auto"):
        flag = "--resize" if resize is not None else "--max-size"
        raise JaxloadError(
            f"{flag} with --video-codec {codec}: resizing re-encodes every camera; use h264 "
            "(what a resize alone chooses), hevc or lossless"
        )
    if max_size is not None and (
        not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 2
    ):
        raise JaxloadError(f"--max-size {max_size!r}: must be an integer of at least 2 pixels")
    if resize is None:
        return None
    if isinstance(resize, str):
        height, sep, width = resize.lower().partition("x")
        try:
            size = (int(height), int(width)) if sep else None
        except ValueError:
            size = None
    else:
        size = tuple(int(v) for v in resize) if len(resize) == 2 else None
    if size is None or min(size) < 2:
        raise JaxloadError(
            f"--resize {resize!r}: give HEIGHTxWIDTH in pixels, each at least 2, e.g. 224x224"
        )
    if max(size) > MAX_SIDE or size[0] * size[1] > MAX_PIXELS:
        raise JaxloadError(
            f"--resize {resize!r}: larger than H.264/HEVC encode ({MAX_SIDE} pixels a side "
            f"and {MAX_PIXELS:,} pixels a frame at most, level 6.2); give a smaller size"
        )
    if codec in ("h264", "hevc") and (size[0] % 2 or size[1] % 2):
        raise JaxloadError(
            f"--resize {resize!r}: {codec} stores 4:2:0 chroma, which needs even sizes; "
            f"use {size[0] + size[0] % 2}x{size[1] + size[1] % 2}"
        )
    return size


def check_numbers(workers: int | None, shard_bytes: int) -> None:
    if workers is not None and workers < 1:
        raise JaxloadError(f"--workers {workers}: must be at least 1")
    if shard_bytes < 1:
        raise JaxloadError(f"shard size {shard_bytes} bytes: must be at least 1")


def parse_episodes(spec: str) -> list[int]:
    """Parses an episode selection such as "0-9,12,20-25" (inclusive ranges)."""
    selected: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise JaxloadError(f"--episodes {spec!r}: {part!r} is not N or N-M") from None
        if first < 0 or last < first:
            raise JaxloadError(f"--episodes {spec!r}: bad range {part!r}")
        selected.update(range(first, last + 1))
    if not selected:
        raise JaxloadError(f"--episodes {spec!r}: selects nothing")
    return sorted(selected)


def format_ranges(ids: list[int] | tuple[int, ...], limit: int = 8) -> str:
    """Sorted ids as ranges: [0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8" (after `limit` ranges,
    "... (N more)")."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    parts = [f"{a}-{b}" if b > a else f"{a}" for a, b in runs]
    more = f", ... ({len(parts) - limit} more ranges)" if len(parts) > limit else ""
    return ", ".join(parts[:limit]) + more


def check_episodes(wanted: list[int], available: list[int], spec: str | None, where: str) -> None:
    """A JaxloadError naming the selection, what of it does not exist and what does:
    "DIR: --episodes 0-99: episodes 6-99 do not exist (this dataset has 0-5)"."""
    missing = sorted(set(wanted) - set(available))
    if not missing:
        return
    selection = f"--episodes {spec}" if spec is not None else f"episodes {format_ranges(wanted)}"
    noun = "episode" if len(missing) == 1 else "episodes"
    verb = "does" if len(missing) == 1 else "do"
    raise SourceError(
        f"{where}: {selection}: {noun} {format_ranges(missing)} {verb} not exist "
        f"(this dataset has {format_ranges(available)})"
    )


def resize_record(
    options: video.EncodeOptions, camera_sizes: dict[str, tuple[int, int]]
) -> dict[str, Any]:
    """info.json's record of --resize/--max-size (`options`): the flag
    and each camera's source size; nothing when neither was given."""
    if options.resize is None and options.max_size is None:
        return {}
    return {
        "resize": None if options.resize is None else "{}x{}".format(*options.resize),
        "max_size": options.max_size,
        "camera_source_sizes": {cam: list(size) for cam, size in camera_sizes.items()},
    }
