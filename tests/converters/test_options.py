"""converters/options.py: the conversion options, checked. The default keeps the source's
frames; any re-encode option alone chooses h264; each bad value is refused naming its flag.
(--resize end to end: tests/converters/test_convert_resize.py.)"""

from __future__ import annotations

import pytest

from jaxload.converters.options import (
    check_episodes,
    check_numbers,
    encode_options,
    format_ranges,
    parse_episodes,
    parse_resize,
    resize_record,
)
from jaxload.errors import JaxloadError, SourceError


def _options(codec=None, gop=None, crf=None, tune=None, min_psnr=None, **kw):
    return encode_options(codec, gop, crf, tune, min_psnr, **kw)


def test_the_default_copies_and_a_reencode_option_alone_chooses_h264():
    default = _options()
    assert (default.codec, default.gop, default.crf, default.tune) == ("auto", 4, 14, "fastdecode")
    assert default.image_min_psnr == 40.0 and default.min_psnr is None
    for asked in ({"gop": 8}, {"crf": 20}, {"min_psnr": 38}, {"resize": "2x2"}):
        assert _options(**asked).codec == "h264"
    assert _options(crf=20).image_min_psnr is None  # a crf given: no default image target
    assert _options("hevc").tune == ""
    assert _options(max_size=83).max_size == 82  # even: "longer side <= N" holds


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"codec": "vp9"}, "--video-codec 'vp9': choose auto, copy, h264, hevc or lossless"),
        ({"crf": 20, "min_psnr": 40}, "--crf and --min-psnr: give one"),
        ({"codec": "lossless", "min_psnr": 40}, "--min-psnr with --video-codec lossless"),
        ({"min_psnr": 90}, r"--min-psnr 90: must be a number of dB within 20\.\.80"),
        ({"gop": 0}, "--gop 0: must be at least 1"),
        ({"crf": 52}, r"--crf 52: must be within 0\.\.51"),
        ({"tune": "film"}, "--tune 'film': choose fastdecode or none"),
        ({"codec": "hevc", "tune": "fastdecode"}, "--tune fastdecode is for --video-codec h264"),
    ],
)
def test_bad_options_name_the_flag(kw, message):
    with pytest.raises(JaxloadError, match=message):
        _options(**kw)


def test_parse_resize():
    assert parse_resize("224X160", None, "h264") == (224, 160)
    assert parse_resize((3, 5), None, "lossless") == (3, 5)  # odd is fine without 4:2:0
    assert parse_resize(None, None, "auto") is None
    bad = [
        (("2x2", 4, "h264"), "--resize and --max-size: give one"),
        (("2x2", None, "copy"), "--resize with --video-codec copy: resizing re-encodes"),
        ((None, 64, "auto"), "--max-size with --video-codec auto"),
        ((None, 1, "h264"), "--max-size 1: must be an integer of at least 2"),
        ((None, True, "h264"), "--max-size True"),
        (("224", None, "h264"), "give HEIGHTxWIDTH in pixels"),
        (("ax2", None, "h264"), "give HEIGHTxWIDTH in pixels"),
        (("1x2", None, "h264"), "each at least 2"),
        (("8194x2", None, "h264"), "larger than H.264/HEVC encode"),
        (("8000x8000", None, "h264"), "larger than H.264/HEVC encode"),
        (("3x5", None, "hevc"), "hevc stores 4:2:0 chroma, which needs even sizes; use 4x6"),
    ]
    for args, message in bad:
        with pytest.raises(JaxloadError, match=message):
            parse_resize(*args)


def test_numbers():
    check_numbers(None, 1)
    with pytest.raises(JaxloadError, match="--workers 0: must be at least 1"):
        check_numbers(0, 1)
    with pytest.raises(JaxloadError, match="shard size 0 bytes"):
        check_numbers(2, 0)


def test_parse_episodes():
    assert parse_episodes("3, 0-2,2,9-9,") == [0, 1, 2, 3, 9]
    for spec, message in (("a", "'a' is not N or N-M"), ("5-2", "bad range '5-2'"),
                          ("-1", "'-1' is not N or N-M"), (" , ", "selects nothing")):  # fmt: skip
        with pytest.raises(JaxloadError, match=message):
            parse_episodes(spec)


def test_format_ranges_and_check_episodes():
    assert format_ranges([8, 0, 1, 2, 5, 7, 2]) == "0-2, 5, 7-8"
    assert format_ranges(list(range(0, 40, 2)), limit=3) == "0, 2, 4, ... (17 more ranges)"
    check_episodes([0, 1], [0, 1, 2], "0-1", "src")
    with pytest.raises(
        SourceError,
        match=r"^src: --episodes 0-9: episodes 6-9 do not exist \(this dataset has 0-5\)$",
    ):
        check_episodes(list(range(10)), list(range(6)), "0-9", "src")
    with pytest.raises(SourceError, match=r"^src: episodes 4, 7: episode 7 does not exist"):
        check_episodes([4, 7], [4], None, "src")


def test_resize_record():
    assert resize_record(_options(), {"top": (48, 64)}) == {}
    assert resize_record(_options(resize="24x32"), {"top": (48, 64)}) == {
        "resize": "24x32",
        "max_size": None,
        "camera_source_sizes": {"top": [48, 64]},
    }
