"""The checks of meta/episodes.parquet against meta/info.json, vectorised over episodes.

A corrupt table (a length of -5, an offset off by one) must fail at open, naming the file
and the first bad episode, instead of shifting which frames are served. Every check here
is a few numpy operations over whole columns (O(episodes + GOPs), no Python per episode),
run in this order (the first failure is reported):

    check_table(path, info, columns)                       # totals, ranges, unique ids
    check_gops(path, camera, columns, offsets, starts)     # each camera's GOP table
    check_record_layout(path, info, columns, gop_counts)   # records follow each other

`columns` holds the int64 columns `index` (episode_index), `length`, `shard`,
`frames_record_start` and `record_start/<camera>`; a camera's GOP table is (offsets,
starts): episode `r`'s GOPs start at frames `starts[offsets[r]:offsets[r + 1]]`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from jaxload.errors import DatasetError
from jaxload.format import layout
from jaxload.format.layout import DatasetInfo

Bad = Callable[[str], DatasetError]


def check_table(path: str, info: DatasetInfo, columns: Mapping[str, np.ndarray]) -> None:
    """Raises a DatasetError naming `path` (and the first bad episode) unless the table
    agrees with info.json: episode and frame totals, lengths >= 1, shards in range, record
    numbers >= 0, unique episode indices."""
    bad = _bad(path)
    index, lengths = columns["index"], columns["length"]
    n, frames = len(index), int(lengths.sum())
    if n != info.total_episodes or frames != info.total_frames:
        raise bad(
            f"{n} episodes / {frames} frames, but {layout.INFO_PATH} says "
            f"{info.total_episodes} / {info.total_frames}"
        )
    ranges = [
        ("length", lengths, 1, None),
        ("shard", columns["shard"], 0, info.num_shards - 1),
        ("frames_record_start", columns["frames_record_start"], 0, None),
    ]
    ranges += [
        (layout.segment_column(c, "record_start"), columns[f"record_start/{c}"], 0, None)
        for c in info.cameras
    ]
    for name, values, low, high in ranges:
        out = (values < low) | (values > high if high is not None else False)
        if out.any():
            row = int(np.flatnonzero(out)[0])
            raise bad(f"episode {int(index[row])} has {name} {int(values[row])}")
    if len(np.unique(index)) != n:
        raise bad("an episode_index appears twice")


def check_gops(
    path: str,
    camera: str,
    columns: Mapping[str, np.ndarray],
    offsets: np.ndarray,
    starts: np.ndarray,
    *,
    tiled: bool = False,
) -> None:
    """Raises a DatasetError naming `path`, the first bad episode and `camera` unless each
    episode's GOP starts begin at frame 0 and rise within it; `tiled`: known already (fixed
    GOPs, checked as such)."""
    lengths = columns["length"]
    row = None if tiled else first_untiled(offsets, starts, lengths)
    if row is not None:
        shown = starts[offsets[row] : offsets[row + 1]][:8].tolist()
        raise _bad(path)(
            f"episode {int(columns['index'][row])}, camera {camera}: GOP starts "
            f"{shown} do not tile its {int(lengths[row])} frames"
        )


def _bad(path: str) -> Bad:
    def bad(message: str) -> DatasetError:
        return DatasetError(f"{path}: {message}; the table is corrupt (reconvert the dataset)")

    return bad


def first_untiled(offsets: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> int | None:
    """The first episode whose GOP starts do not tile its frames (at least one GOP, the
    first at frame 0, rising, the last before the episode's end); None when all do."""
    counts = np.diff(offsets)
    ok = counts > 0
    if starts.size:
        first = starts[np.minimum(offsets[:-1], starts.size - 1)]
        last = starts[np.maximum(offsets[1:] - 1, 0)]
        ok &= (first == 0) & (last < lengths)
        opens = np.zeros(starts.size, bool)  # where an episode's GOPs begin
        opens[offsets[:-1][counts > 0]] = True
        falls = np.flatnonzero((np.diff(starts) <= 0) & ~opens[1:]) + 1
        ok[np.searchsorted(offsets, falls, side="right") - 1] = False
    wrong = np.flatnonzero(~ok)
    return int(wrong[0]) if wrong.size else None


def check_record_layout(
    path: str,
    info: DatasetInfo,
    columns: Mapping[str, np.ndarray],
    counts: Mapping[str, np.ndarray],
) -> None:
    """Raises a DatasetError naming `path` and the first bad episode unless each episode's
    records (frame blocks, then per camera in key order its init segment and GOPs) follow
    each other without gap or overlap, episodes tile their shard from record 0, and each
    shard ends where info.json's record count says (format 3). `counts[camera]`: the GOPs
    of each episode."""
    bad = _bad(path)
    index, shards = columns["index"], columns["shard"]
    frames_start = columns["frames_record_start"]
    ends = frames_start + -(-columns["length"] // layout.FRAMES_PER_BLOCK)
    for cam in sorted(counts):
        starts = columns[f"record_start/{cam}"]
        wrong = np.flatnonzero(starts != ends)
        if wrong.size:
            row = int(wrong[0])
            raise bad(
                f"episode {int(index[row])}, camera {cam}: records start at "
                f"{int(starts[row])}, expected {int(ends[row])} (right after the previous ones)"
            )
        ends = starts + 1 + counts[cam]
    order = np.lexsort((frames_start, shards))
    shard, first, last = shards[order], frames_start[order], ends[order]
    opens_shard = np.r_[True, shard[1:] != shard[:-1]]
    expected = np.where(opens_shard, 0, np.r_[0, last[:-1]])
    wrong = np.flatnonzero(first != expected)
    if wrong.size:
        row = order[wrong[0]]
        raise bad(
            f"episode {int(index[row])} starts at record {int(first[wrong[0]])} of "
            f"shard {int(shard[wrong[0]])}, expected {int(expected[wrong[0]])}"
        )
    # Rows in record order (as written): positions then follow from the lengths and GOP
    # tables (covered by the record key, jaxload.format.sealing), so two episodes' places
    # swapped cannot serve one's records as the other's.
    moved = np.flatnonzero(order != np.arange(order.size))
    if moved.size:
        row = int(moved[0])
        raise bad(
            f"episode {int(index[row])} (row {row}) is not stored after the row before it; "
            "rows must follow the shards' record order"
        )
    if info.shard_records:
        closes_shard = np.r_[shard[1:] != shard[:-1], True]
        counts_ = np.asarray(info.shard_records, np.int64)
        done = shard[closes_shard]
        wrong = np.flatnonzero(last[closes_shard] != counts_[done])
        if wrong.size:
            s, end = int(done[wrong[0]]), int(last[closes_shard][wrong[0]])
            raise bad(
                f"shard {s}'s episodes end at record {end}, but "
                f"{layout.INFO_PATH} says it holds {int(counts_[s])}"
            )
