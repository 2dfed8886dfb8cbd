"""CPU decode of stored video segments with torchcodec.

A segment is a self-contained mp4 holding one GOP, so frame k of a segment is its k-th
frame in presentation order: no timestamps are involved at read time. torchcodec's
decoders are not thread-safe, so every call makes its own decoder; nothing is shared
between threads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torchcodec.decoders import VideoDecoder


def decode_segment(segment: bytes, frames: Sequence[int]) -> np.ndarray:
    """Decodes frames `frames` (indices within the segment) to uint8 (N, H, W, 3) RGB."""
    # "exact" indexes the segment's few packets up front: frame k is packet order k.
    decoder = VideoDecoder(segment, seek_mode="exact", dimension_order="NHWC")
    return decoder.get_frames_at(indices=list(frames)).data.numpy()


def segment_num_frames(segment: bytes) -> int:
    """Number of frames in a segment, counted from its packets."""
    return VideoDecoder(segment, seek_mode="exact").metadata.num_frames
