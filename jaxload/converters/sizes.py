"""Where a conversion's bytes go: the output split by what the bytes are, beside the source.

`dataset_sizes(path)` splits every byte under a converted dataset into one of:

| field | what | grows with |
|---|---|---|
| `video_payload` | the codec bitstream: the `mdat` contents of every GOP record, per camera | frames |
| `gop_boxes` | each GOP record's fMP4 framing: its `moof` and `mdat` header | GOPs |
| `init_segments` | per episode and camera, the mp4 init segment (`ftyp` + `moov`) | episodes |
| `tabular` | the frame records' rows | frames |
| `record_framing` | per record its Riegeli chunk header, 8-byte checksum and, where zstd cannot shrink it (video), zstd's framing; block headers; file signatures | records |
| `tabular_zstd`, `video_zstd` | what ArrayRecord's zstd saves on the records that do shrink (frame rows; init segments, small GOPs): zero or negative | records |
| `record_index` | ArrayRecord footers and the `.offsets` files beside the shards (format 4): each record's offset | records |
| `shard_tail` | per shard the postscript and the zeros that align footer and postscript to 64 KiB blocks | shards |
| `metadata` | the files under `meta/`, by name (`stats_sketch.npz` is the quantile sketch) | dataset |
| `other` | anything else | |

Every field but the two zstd savings is counted before compression, so `video_payload` is
exactly the bitstream a demuxer sees. Fixed costs (`fixed`) are the last three: a tiny
dataset is mostly fixed costs, a large one converges to its per-frame bytes (`per_frame`).
`source_sizes` splits the LeRobot source the same way (video bitstream, mp4 container,
parquet, meta), and `conversion_sizes` puts the two side by side for the summary
`jaxload convert` prints:

    >>> sizes = dataset_sizes("out/demo")
    >>> sizes.total == sum(f.stat().st_size for f in Path("out/demo").rglob("*") if f.is_file())
    True
    >>> sorted(sizes.video_payload), sizes.fixed + sizes.per_frame == sizes.total
    (['observation.images.top'], True)

`sizes.table()` gives the split as lines (what `jaxload info` can print).

Reading the split costs one read of the video records (the `moof` of each GOP sits inside
its record) and a walk over the shards' chunk headers (converters/shard_layout.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxload import format as fmt
from jaxload.converters.lerobot_common import LeRobotSource
from jaxload.converters.shard_layout import CHUNK_HEADER, shard_layout
from jaxload.errors import JaxloadError
from jaxload.format.reader import read_episodes
from jaxload.format.shards import open_shard

log = logging.getLogger("jaxload.converters.sizes")

READ_BATCH = 256  # records per read
SKETCH = "meta/stats_sketch.npz"
_BOX = struct.Struct(">I4s")


@dataclasses.dataclass(frozen=True)
class DatasetSizes:
    """Every byte of a converted dataset, by what it is (module docstring); sums to `total`."""

    video_payload: dict[str, int]  # camera -> codec bitstream bytes
    gop_boxes: int
    init_segments: int
    tabular: int
    record_framing: int
    tabular_zstd: int  # <= 0
    video_zstd: int  # <= 0
    record_index: int
    shard_tail: int
    metadata: dict[str, int]  # path under the dataset -> bytes
    other: int
    frames: int = 0
    shards: int = 0

    @property
    def video(self) -> int:
        return sum(self.video_payload.values())

    @property
    def container(self) -> int:
        """What wraps the video and the rows on disk: mp4 boxes, record framing and the
        index, less what zstd saves on the video records."""
        boxes = self.gop_boxes + self.init_segments + self.video_zstd
        return boxes + self.record_framing + self.record_index

    @property
    def tabular_stored(self) -> int:
        """The frame rows as stored (after zstd)."""
        return self.tabular + self.tabular_zstd

    @property
    def per_frame(self) -> int:
        """Bytes that grow with the data: video, its container, tabular records."""
        return self.video + self.container + self.tabular_stored

    @property
    def fixed(self) -> int:
        """Bytes that do not grow with frames: metadata files, shard tails, the rest."""
        return sum(self.metadata.values()) + self.shard_tail + self.other

    @property
    def total(self) -> int:
        return self.per_frame + self.fixed

    @property
    def not_video_fraction(self) -> float:
        """Per-frame bytes that are not video payload, as a fraction of the per-frame bytes."""
        return (self.per_frame - self.video) / max(self.per_frame, 1)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out |= {"video": self.video, "container": self.container, "per_frame": self.per_frame}
        out |= {"tabular_stored": self.tabular_stored}
        out |= {"fixed": self.fixed, "total": self.total}
        return out | {"not_video_fraction": self.not_video_fraction}

    def table(self) -> list[str]:
        """The split as aligned lines (bytes, share of the total), for `jaxload info`."""
        rows = [(f"video payload {cam}", n) for cam, n in sorted(self.video_payload.items())]
        rows += [
            ("mp4 boxes per GOP (moof, mdat header)", self.gop_boxes),
            ("mp4 init segments (per episode, camera)", self.init_segments),
            ("tabular frame rows", self.tabular),
            ("record framing and checksums", self.record_framing),
            ("zstd savings on frame rows", self.tabular_zstd),
            ("zstd savings on video records", self.video_zstd),
            ("record index (ArrayRecord footers, .offsets)", self.record_index),
            ("shard padding and postscripts", self.shard_tail),
            *((name, n) for name, n in sorted(self.metadata.items())),
        ]
        if self.other:
            rows.append(("other files", self.other))
        total = max(self.total, 1)
        lines = [f"{name:<44} {_size(n):>10} {100 * n / total:5.1f}%" for name, n in rows]
        head = f"{self.frames} frames, {self.shards} shard(s)"
        return [f"{'total (' + head + ')':<44} {_size(self.total):>10} 100.0%", *lines]


@dataclasses.dataclass(frozen=True)
class SourceSizes:
    """The bytes a conversion read from its LeRobot source, and its metadata beside them."""

    video_files: dict[str, int]  # camera -> bytes of the mp4 files its episodes read
    video_payload: dict[str, int]  # camera -> their codec bitstream (mdat contents)
    payload_measured: bool  # False: remote files, payload is the files' bytes
    data_files: int  # parquet data files (tabular rows; image cameras' PNG/JPEG)
    meta_files: int  # the files under meta/ (whole; not in `total`)

    @property
    def total(self) -> int:
        """The data and video files of the episodes converted (`ConvertReport.source_bytes`
        when all are: it counts shared files whole)."""
        return sum(self.video_files.values()) + self.data_files


@dataclasses.dataclass(frozen=True)
class ConversionSizes:
    """An output's split beside its source's: what the convert summary says about sizes."""

    output: DatasetSizes
    source: SourceSizes

    @property
    def ratio(self) -> float:
        """output / source (data and video files)."""
        return self.output.total / max(self.source.total, 1)

    @property
    def reencoding(self) -> float | None:
        """Stored / source video bitstream, over the cameras that had a source video."""
        cams = [c for c in self.source.video_payload if self.source.video_payload[c] > 0]
        if not cams:
            return None
        stored = sum(self.output.video_payload.get(c, 0) for c in cams)
        return stored / sum(self.source.video_payload[c] for c in cams)

    def lines(self) -> list[str]:
        """Two summary lines: the ratio and the re-encoding's share; fixed vs per-frame."""
        out, src = self.output, self.source
        metadata = sum(out.metadata.values())
        sketch = out.metadata.get(SKETCH, 0)
        return [
            f"output: {_size(out.total)}; output is {self.ratio:.2f}x the source "
            f"({_size(src.total)} of data and video files){self._reencoding()}",
            f"sizes: {_size(out.fixed)} fixed (metadata {_size(metadata)}"
            + (f" incl. the stats sketch's {_size(sketch)}" if sketch else "")
            + f", shard padding {_size(out.shard_tail + out.other)}) + {_size(out.per_frame)} "
            f"that grow with the frames ({_size(out.per_frame // max(out.frames, 1))} per frame), "
            f"{out.per_frame / max(src.total, 1):.2f}x the source: " + self._per_frame(),
        ]

    def _reencoding(self) -> str:
        m = self.reencoding
        if m is not None:
            bitstream = "video bitstream" if self.source.payload_measured else "video files"
            return f", of which the video {m:.2f}x (stored / source {bitstream})"
        if self.output.video_payload:
            return "; no source video to compare (image cameras)"
        return "; no cameras"

    def _per_frame(self) -> str:
        out = self.output
        tabular = f"tabular {_size(out.tabular_stored)}"
        if not out.video:
            return f"{tabular}, record framing and index {_size(out.container)}"
        share = 100 * out.container / out.video
        return (
            f"video {_size(out.video)}, container +{share:.1f}% of it (mp4 boxes, record "
            f"framing, index), {tabular}"
        )


# --- the output -----------------------------------------------------------------------------


def dataset_sizes(path: str | os.PathLike) -> DatasetSizes:
    """Splits every byte under the converted dataset at `path` (module docstring).

    Example::

        print("\\n".join(dataset_sizes("out/my_dataset").table()))
    """
    root = Path(path)
    info = fmt.read_info(root)
    episodes = read_episodes(root, info)
    cameras = sorted(info.cameras)
    parts = _Tally(cameras)
    shard_files = set()
    offsets_bytes = 0
    for shard in range(info.num_shards):
        rel = fmt.shard_path(shard)
        shard_files.add(rel)
        owners = _record_owners(episodes, shard, cameras)
        _tally_shard(root / rel, owners, cameras, parts)
        index = root / fmt.offsets_path(shard)
        if index.is_file():  # format 4: the record offset index for byte-range reads
            shard_files.add(fmt.offsets_path(shard))
            offsets_bytes += index.stat().st_size
    metadata, other = {}, 0
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        if rel in shard_files:
            continue
        if rel.startswith("meta/"):
            metadata[rel] = file.stat().st_size
        else:
            other += file.stat().st_size
    return DatasetSizes(
        video_payload=dict(zip(cameras, parts.video)),
        gop_boxes=parts.gop_boxes,
        init_segments=parts.init_segments,
        tabular=parts.tabular,
        record_framing=parts.framing,
        tabular_zstd=parts.tabular_zstd,
        video_zstd=parts.video_zstd,
        record_index=parts.index + offsets_bytes,
        shard_tail=parts.tail,
        metadata=metadata,
        other=other,
        frames=info.total_frames,
        shards=info.num_shards,
    )


class _Tally:
    """Running sums over the shards of a dataset."""

    def __init__(self, cameras: Sequence[str]):
        self.video = [0] * len(cameras)
        self.gop_boxes = self.init_segments = self.tabular = 0
        self.framing = self.tabular_zstd = self.video_zstd = self.index = self.tail = 0


TABULAR, INIT = -1, -2  # record owners besides the camera numbers (GOP records)


def _record_owners(episodes, shard: int, cameras: Sequence[str]) -> np.ndarray:
    """What each record of `shard` holds: TABULAR, INIT, or the camera number of a GOP."""
    rows = np.flatnonzero(episodes.shard == shard)
    end = max((episodes.records_end(r) for r in rows), default=0)
    owners = np.full(end, TABULAR, dtype=np.int64)
    for row in rows:
        for number, cam in enumerate(cameras):
            run = episodes.camera_records(row, cam)
            owners[run.start] = INIT
            owners[run.start + 1 : run.stop] = number
    return owners


def _tally_shard(path: Path, owners: np.ndarray, cameras: Sequence[str], parts: _Tally) -> None:
    layout = shard_layout(path)
    if len(layout.records) != len(owners):
        raise ValueError(
            f"{path}: {len(layout.records)} records, meta/episodes.parquet places {len(owners)}"
        )
    check = fmt.RECORD_CHECK_BYTES
    # A record's chunk on disk is a chunk header and the record (its content and checksum)
    # through zstd: the difference grows the framing or, when zstd shrinks the record, is
    # its saving.
    change = layout.records - CHUNK_HEADER - layout.decoded
    tabular = owners == TABULAR
    parts.framing += layout.framing + (CHUNK_HEADER + check) * len(owners)
    parts.framing += int(change[change > 0].sum())
    parts.tabular += int(layout.decoded[tabular].sum()) - check * int(tabular.sum())
    parts.tabular_zstd += int(change[tabular & (change < 0)].sum())
    parts.video_zstd += int(change[~tabular & (change < 0)].sum())
    video = np.flatnonzero(~tabular)
    parts.index += layout.footer
    parts.tail += layout.tail
    reader = open_shard(path)
    try:
        for first in range(0, len(video), READ_BATCH):
            batch = video[first : first + READ_BATCH]
            for number, stored in zip(batch, reader.read(batch.tolist())):
                if len(stored) != layout.decoded[number]:
                    raise ValueError(f"{path}: record {number} size differs from its chunk's")
                payload = len(stored) - check
                if owners[number] == INIT:
                    parts.init_segments += payload
                else:
                    mdat = _mdat_payload(stored[:-check])
                    parts.video[owners[number]] += mdat
                    parts.gop_boxes += payload - mdat
    finally:
        reader.close()


def _mdat_payload(fragment: bytes) -> int:
    """Bytes inside the `mdat` boxes of an mp4 fragment (`moof` + `mdat`)."""
    return sum(size - header for kind, size, header in _boxes(fragment) if kind == b"mdat")


# --- the source -------------------------------------------------------------------------------


def source_sizes(source: LeRobotSource, episodes: Sequence[int]) -> SourceSizes:
    """The bytes of the source files `episodes` read, split like the output's.

    A file shared with episodes not converted (LeRobot v3.0 packs episodes together)
    counts in proportion to the frames converted, so a subset compares with its share.
    Video payload is the `mdat` contents of each mp4 file (its header boxes alone are
    read); for a remote source (its files may be gone from the cache) the files' bytes
    stand in for it.
    """
    files = source.files
    measured = not files.remote
    share = _frame_shares(source, episodes)

    def shared(rels: set[str], size=files.size) -> int:
        return round(sum(share[rel] * size(rel) for rel in rels))

    def bitstream(rel: str) -> int:
        return _mp4_payload(files.local(rel))

    video_files: dict[str, int] = {}
    payload: dict[str, int] = {}
    for cam in source.video_keys:
        rels = {source.video_span(ep, cam).rel for ep in episodes}
        video_files[cam] = shared(rels)
        payload[cam] = shared(rels, bitstream) if measured else video_files[cam]
    meta = sum(n for rel, n in files.listing().items() if rel.startswith("meta/"))
    return SourceSizes(
        video_files=video_files,
        video_payload=payload,
        payload_measured=measured,
        data_files=shared({source.data_file(ep) for ep in episodes}),
        meta_files=meta,
    )


def conversion_sizes(
    out: str | os.PathLike, source: LeRobotSource, episodes: Sequence[int]
) -> ConversionSizes | None:
    """The output's and the source's splits; None (with a warning) when either cannot be
    read: the conversion itself is done and correct, only its size summary is missing."""
    try:
        return ConversionSizes(dataset_sizes(out), source_sizes(source, episodes))
    except (OSError, ValueError, JaxloadError) as e:
        log.warning("%s: no size breakdown (%s)", out, e)
        return None


def _frame_shares(source: LeRobotSource, episodes: Sequence[int]) -> dict[str, float]:
    """Per data and video file, the fraction of its frames that belong to `episodes`."""
    frames: dict[str, list[int]] = {}
    chosen = set(episodes)
    for ep in source.episode_ids:
        length = source.episode(ep).length
        for rel in source.episode_files(ep):
            counts = frames.setdefault(rel, [0, 0])
            counts[0] += length if ep in chosen else 0
            counts[1] += length
    return {rel: taken / max(total, 1) for rel, (taken, total) in frames.items()}


def _mp4_payload(path: Path) -> int:
    """Bytes inside the top-level `mdat` boxes of an mp4 file, reading only box headers."""
    total, size = 0, path.stat().st_size
    with open(path, "rb") as f:
        offset = 0
        while offset + 8 <= size:
            f.seek(offset)
            head = f.read(16)
            box, kind = _BOX.unpack_from(head)
            header = 8
            if box == 1:  # 64-bit size follows
                box, header = struct.unpack_from(">Q", head, 8)[0], 16
            elif box == 0:  # to the end of the file
                box = size - offset
            if box < header:
                raise ValueError(f"{path}: bad mp4 box size {box} at byte {offset}")
            if kind == b"mdat":
                total += box - header
            offset += box
    return total


def _boxes(data: bytes):
    """(type, size, header size) of each top-level box of an in-memory mp4."""
    offset = 0
    while offset + 8 <= len(data):
        size, kind = _BOX.unpack_from(data, offset)
        header = 8
        if size == 1:
            size, header = struct.unpack_from(">Q", data, offset + 8)[0], 16
        elif size == 0:
            size = len(data) - offset
        if size < header:
            raise ValueError(f"bad mp4 box size {size} ({kind!r})")
        yield kind, size, header
        offset += size


def _size(n: int) -> str:
    """Bytes for people: KiB below 1 MiB."""
    if abs(n) >= 2**20:
        return f"{n / 2**20:.2f} MiB"
    return f"{n / 2**10:.0f} KiB" if abs(n) >= 2**10 else f"{n} B"


def source_file_bytes(source: LeRobotSource, episodes: Sequence[int]) -> int:
    """Bytes of the source files holding `episodes` (each file counted once)."""
    rels = {rel for ep in episodes for rel in source.episode_files(ep)}
    return sum(source.files.size(rel) for rel in rels)


def tree_bytes(root: Path) -> int:
    """Bytes of every file under `root`."""
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
