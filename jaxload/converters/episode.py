"""Converts one source episode: its tabular rows into frame blocks, each camera's frames
into an mp4 init segment and self-contained GOP fragments (transcoded, or copied from an
h264/hevc source).

This is the per-episode work every engine runs; it depends only on the episode and the
options, never on which process or machine runs it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxload.converters import video
from jaxload.converters.images import image_frames
from jaxload.converters.lerobot_common import LeRobotSource
from jaxload.converters.tabular import frame_blocks
from jaxload.errors import SourceError
from jaxload.format import Feature


@dataclasses.dataclass
class EpisodeResult:
    """One converted episode: its records and what the metadata needs to know about them."""

    episode_index: int
    length: int
    dataset_from_index: int
    tasks: list[str]
    frames: list[bytes]  # tabular rows, FRAMES_PER_BLOCK per record
    streams: dict[str, video.EncodedStream]
    strings: dict[str, list[str]]  # string feature -> this episode's vocabulary

    def record_blocks(self) -> list[list[bytes]]:
        """The episode's records in storage order: frame blocks, then cameras sorted (each
        its init segment, then its GOPs)."""
        return [self.frames, *(self.streams[c].records for c in sorted(self.streams))]


def convert_episode(
    source: LeRobotSource,
    episode: int,
    options: video.EncodeOptions,
    features: dict[str, Feature],
) -> EpisodeResult:
    """Reads, checks and converts one episode; raises SourceError naming file and episode."""
    ep = source.episode(episode)
    table = source.episode_frames(episode)
    where = f"{source.files.describe(source.data_file(episode))}: episode {episode}"
    timestamps = table["timestamp"].to_numpy().astype(np.float64)
    streams = {}
    for cam in source.camera_keys:
        if cam in source.image_keys:
            streams[cam] = _image_stream(source, table, cam, options, where)
        else:
            streams[cam] = _camera_stream(source, episode, cam, timestamps, options)
    frames, strings = frame_blocks(table, features, where)
    return EpisodeResult(
        episode_index=ep.index,
        length=ep.length,
        dataset_from_index=ep.start,
        tasks=list(ep.tasks),
        frames=frames,
        streams=streams,
        strings=strings,
    )


def _image_stream(
    source: LeRobotSource, table, cam: str, options: video.EncodeOptions, where: str
) -> video.EncodedStream:
    """An `image` camera's frames (PNG/JPEG in the data rows) encoded as a video stream."""
    import av

    size = source.camera_size(cam)
    options = options.for_camera(cam, image=True)

    def frames():
        for array in image_frames(table, cam, size, where=where):
            yield av.VideoFrame.from_ndarray(array, format="rgb24")

    return _encode(frames, options, source.fps, f"{where}, camera {cam!r}")


def _encode(frames, options: video.EncodeOptions, fps: int, where: str) -> video.EncodedStream:
    """Transcodes `frames()`; under a PSNR target, re-encodes at a lower crf until every
    frame reaches it (the crf chosen from a sample usually suffices; crf 0 is the floor).
    A stream that decodes to something else than its source is an error, never written."""
    while True:
        stream = video.transcode(frames(), options, fps, where=where)
        worst = float(stream.psnr.min())
        if worst < video.BROKEN_PSNR_DB:
            raise SourceError(
                f"{where}: the stored {stream.codec} stream decodes to frames {worst:.1f} dB "
                "from the source (broken, not lossy); nothing was written. Try another "
                "--video-codec (h264 is the tested default)"
            )
        if options.min_psnr is None or options.codec == "lossless" or worst >= options.min_psnr:
            return stream
        if options.crf == 0:  # the best a lossy stream does; the summary shows the miss
            return stream
        options = dataclasses.replace(options, crf=max(0, options.crf - 2))


def _camera_stream(
    source: LeRobotSource,
    episode: int,
    cam: str,
    timestamps: np.ndarray,
    options: video.EncodeOptions,
) -> video.EncodedStream:
    span = source.video_span(episode, cam)
    path = source.files.local(span.rel, f"video of episode {episode}, camera {cam}")
    name = source.files.describe(span.rel)
    if path.stat().st_size == 0:
        raise SourceError(f"{name}: empty file (video of episode {episode})")
    options = options.for_camera(cam, source_codec=source.source_codec(cam))
    try:
        if options.codec == "copy":
            return video.copy_stream(
                path, span.from_timestamp, span.to_timestamp, timestamps, episode=episode
            )

        def frames():
            return video.decode_source_frames(
                path, span.from_timestamp, timestamps, episode=episode
            )

        return _encode(frames, options, source.fps, f"{name}: episode {episode}")
    except SourceError as e:
        if str(path) == name:
            raise
        # A remote file is decoded from its cached copy: name the URL, not the cache.
        raise SourceError(str(e).replace(str(path), name)) from e
