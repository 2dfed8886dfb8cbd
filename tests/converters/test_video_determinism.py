"""Conversion output is byte-for-byte reproducible, also across processes.

libx264's AVX-512 kernels make its output nondeterministic on AVX-512 CPUs for frame
widths that are not a multiple of 64: converting the shared 84-pixel-wide H.264 fixture
uncapped in 8 fresh processes gave 3 different fingerprints here (2026-11-22; 2 of the 8
runs deviated, each differently). It only shows between processes, so an in-process test
cannot catch it. converters.video.x264_asm_cap caps libx264 at AVX2 on such CPUs; this test
converts in several fresh processes and requires one fingerprint.
"""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.processes

PROCESSES = 4
CONVERT = """
import sys
from jaxload.converters.convert import convert
convert(sys.argv[1], sys.argv[2], workers=1, progress=False)
"""


def _fingerprint(src, out):
    subprocess.run([sys.executable, "-c", CONVERT, str(src), str(out)], check=True)
    return json.loads((out / "meta/info.json").read_text())["fingerprint"]


def test_conversions_in_fresh_processes_are_identical(shared_lerobot, tmp_path):
    src = shared_lerobot / "h264_single"
    with ThreadPoolExecutor(2) as pool:
        prints = set(pool.map(lambda i: _fingerprint(src, tmp_path / f"o{i}"), range(PROCESSES)))
    assert len(prints) == 1
