"""`--min-psnr`: choosing each camera's crf from a fidelity target.

A fixed crf gives different fidelity on different footage (crf 14 keeps the fixtures'
renders above 40 dB but noisy 480x640 camera footage near 38). Given a target, each
camera's crf is the largest (smallest output) whose encode of a sample of the camera's
frames reaches the target on every sampled frame, found by bisection (PSNR falls as crf
rises). The sample and the search depend only on the source, so the choice, and with it
the output bytes, are deterministic. Episodes outside the sample that still miss the
target are re-encoded at a lower crf (converters/episode.py), so the final report always
shows the target met.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxload.converters import video
from jaxload.converters.images import image_frames
from jaxload.converters.lerobot_common import LeRobotSource

SAMPLE_EPISODES = 3  # spread over the selection: first, middle, last
SAMPLE_FRAMES = 24  # per sampled episode: a few GOPs, from its start


def choose_crfs(
    source: LeRobotSource, episodes: Sequence[int], options: video.EncodeOptions
) -> tuple[tuple[str, int], ...]:
    """(camera, crf) for every camera with a PSNR target (`--min-psnr`, or the image
    cameras' default): the largest crf meeting it on the sample (0 when none does)."""
    sample = _sample_episodes(episodes)
    chosen = []
    for cam in source.camera_keys:
        camera_options = options.for_camera(
            cam, image=cam in source.image_keys, source_codec=source.source_codec(cam)
        )
        if camera_options.min_psnr is None or camera_options.codec not in ("h264", "hevc"):
            continue  # a fixed crf, lossless or copied
        frames = [f for ep in sample for f in _source_frames(source, ep, cam)]
        chosen.append((cam, _largest_crf(frames, camera_options, source.fps, cam)))
    return tuple(chosen)


def _sample_episodes(episodes: Sequence[int]) -> list[int]:
    picks = np.linspace(0, len(episodes) - 1, num=min(SAMPLE_EPISODES, len(episodes)))
    return [episodes[i] for i in sorted(set(picks.round().astype(int)))]


def _largest_crf(frames: list, options: video.EncodeOptions, fps: int, cam: str) -> int:
    """Bisection over crf 0..51 for the largest crf whose min PSNR reaches the target."""
    lo, hi = 0, 51  # invariant: every crf < lo meets the target (lo = 0: none known)
    best = 0
    while lo <= hi:
        crf = (lo + hi) // 2
        trial = dataclasses.replace(options, crf=crf, min_psnr=None, camera_crf=())
        stream = video.transcode(iter(frames), trial, fps, where=f"--min-psnr sample of {cam!r}")
        if stream.psnr.min() >= options.min_psnr:
            best, lo = crf, crf + 1
        else:
            hi = crf - 1
    return best


def _source_frames(source: LeRobotSource, episode: int, cam: str) -> list:
    """The first SAMPLE_FRAMES frames of an episode's camera, as the converter feeds them
    to the encoder (PyAV frames: a video's stay in its YUV)."""
    import av

    table = source.episode_frames(episode).slice(0, SAMPLE_FRAMES)
    where = f"{source.files.describe(source.data_file(episode))}: episode {episode}"
    if cam in source.image_keys:
        arrays = image_frames(table, cam, source.camera_size(cam), where=where)
        return [av.VideoFrame.from_ndarray(a, format="rgb24") for a in arrays]
    span = source.video_span(episode, cam)
    path = source.files.local(span.rel, f"video of episode {episode}, camera {cam}")
    timestamps = table["timestamp"].to_numpy().astype(np.float64)
    decoded = video.decode_source_frames(path, span.from_timestamp, timestamps, episode=episode)
    return list(decoded)
