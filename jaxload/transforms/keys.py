"""Per-sample random numbers keyed by (seed, global position): the randomness of every
image transform comes from here, so the augmented pixels of the sample at position p are
a pure function of (seed, p) whatever the worker count, host count or restore point.

A draw is a counter-based hash (SplitMix64's finalizer, as the epoch permutations use):
no generator state exists, so nothing needs saving, and any row's numbers are computed
without the rows before it. Each (camera, transform) pair has its own stream, named by a
string, so cameras of one sample get independent draws and adding a camera changes
nobody else's.

    u = uniforms(seed=0, positions=np.arange(4), stream="observation.images.top/1", count=3)
    u.shape  # (4, 3), float64 in [0, 1)
"""

from __future__ import annotations

import zlib

import numpy as np

from jaxload.sampling.permutation import mix64, stream_key

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_DRAW_STEP = _U64(0xD6E8FEB86659FD93)
# Transform streams are kept apart from the sampling streams (0, 1, ... per dataset).
_TRANSFORM_DOMAIN = 0x7472616E73666F72  # "transfor"


def stream_id(name: str) -> int:
    """A stable 64-bit id for a stream name (CRC-32 of both halves: no Python hash seed)."""
    data = name.encode()
    return (zlib.crc32(data) << 32) | zlib.crc32(data[::-1] + b"\x00")


def uniforms(seed: int, positions: np.ndarray, stream: str, count: int) -> np.ndarray:
    """(len(positions), count) floats in [0, 1), one row per global position.

    Row p depends only on (seed, p, stream): the same in any process, batch or order."""
    key = stream_key(seed, _TRANSFORM_DOMAIN ^ stream_id(stream))
    rows = mix64(_U64(key) ^ mix64(np.asarray(positions, dtype=_U64) + _GOLDEN))
    draws = (np.arange(1, count + 1, dtype=_U64) * _DRAW_STEP)[None, :]
    bits = mix64(rows[:, None] + draws)
    return (bits >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))
