"""Byte-range requests for records: the records a read or a planned batch needs, merged
per shard across small gaps into as few requests as the size limit allows.

A merged request fetches the gap between two records too: a gap costs its bytes, a
request its latency and per-request CPU, so `RemoteStore.coalesce_bytes` sets the gap
worth spanning. Keys are sorted (shard, record) pairs; `offsets[shard]` are the shard's
record offsets (record r is bytes offsets[r]..offsets[r + 1]).

    coalesce([(0, 1), (0, 2), (0, 9)], {0: offsets}, gap=64 << 10, most=16 << 20)
    # [(0, offsets[1], offsets[10], [1, 2, 9])]  when the gap 3..9 is under 64 KiB
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def coalesce(
    keys: Sequence[tuple[int, int]], offsets: Mapping[int, np.ndarray], gap: int, most: int
) -> list[tuple[int, int, int, list[int]]]:
    """(shard, start, end, records) requests covering `keys` (sorted), merged across gaps
    of at most `gap` bytes up to `most` bytes (a record larger than that is a request of
    its own). A loop over the records: cuts found with numpy were no faster for the ~65
    records a batch reads, and slower when they lie in as many shards."""
    out: list[tuple[int, int, int, list[int]]] = []
    by_shard: dict[int, list[int]] = {}
    for shard, record in keys:
        by_shard.setdefault(shard, []).append(record)
    for shard, records in by_shard.items():
        index = np.asarray(records)
        starts, ends = offsets[shard][index].tolist(), offsets[shard][index + 1].tolist()
        first, last, members = starts[0], ends[0], [records[0]]
        for record, start, end in zip(records[1:], starts[1:], ends[1:], strict=True):
            if start - last <= gap and max(end, last) - first <= most:
                last = max(end, last)
                members.append(record)
                continue
            out.append((shard, first, last, members))
            first, last, members = start, end, [record]
        out.append((shard, first, last, members))
    return out


__all__ = ["coalesce"]
