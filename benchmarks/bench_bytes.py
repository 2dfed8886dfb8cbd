"""Bytes read per sample vs episode length, on the benchmark datasets.

    python benchmarks/bench_bytes.py            # writes benchmarks/results_bytes.json

For the small and the large benchmark dataset: opens the dataset with the benchmark's
windows and reads single samples (`ds[i]`) anchored in the shortest and in the longest
episodes, counting the bytes this process reads with Linux's per-process counter
(/proc/self/io `rchar`: every read() the ArrayRecord reader makes, page cache or not) around
each read. Confirms that a sample costs O(window + GOP) bytes: the same in a 10-frame and a
600-frame episode, and a small fraction of a long episode's bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import bench_data  # noqa: E402
from benchmarks.bench_data import specs_for  # noqa: E402

SHORT_MAX = 60  # frames: an episode this long or shorter is "short"
ANCHORS_PER_GROUP = 40


def rchar() -> int:
    """Bytes this process has read so far (all read() calls, cached or not)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def anchors(ds, rows: np.ndarray, count: int) -> np.ndarray:
    """`count` dataset positions spread evenly over the frames of the episodes at `rows`."""
    positions = np.concatenate(
        [ds.episode_starts[r] + np.arange(ds.episode_lengths[r]) for r in rows]
    )
    pick = np.linspace(0, len(positions) - 1, min(count, len(positions))).round().astype(int)
    return positions[pick]


def bytes_per_sample(ds, positions: np.ndarray) -> np.ndarray:
    """rchar delta around each single-sample read."""
    out = []
    for p in positions:
        before = rchar()
        ds[int(p)]
        out.append(rchar() - before)
    return np.asarray(out)


def measure(path: Path) -> dict:
    """Short- vs long-episode bytes per sample for one dataset."""
    import jaxload
    from jaxload.tools import bench

    ds = jaxload.open(path, delta_timestamps=bench.bench_windows(path))
    ds[0]  # opens the shard reader (reads its index once)
    lengths = ds.episode_lengths
    order = np.argsort(lengths)
    short = order[lengths[order] <= SHORT_MAX][:4]
    if len(short) == 0:
        short = order[:1]
    long = order[::-1][:2]
    shard_bytes = sum(f.stat().st_size for f in (Path(path) / "data").glob("*.array_record"))
    bytes_per_frame = shard_bytes / len(ds)
    groups = {}
    for name, rows in (("short", short), ("long", long)):
        cost = bytes_per_sample(ds, anchors(ds, rows, ANCHORS_PER_GROUP))
        groups[name] = {
            "episode_lengths": [int(lengths[r]) for r in rows],
            "samples": len(cost),
            "mean_bytes": float(cost.mean()),
            "median_bytes": float(np.median(cost)),
            "max_bytes": int(cost.max()),
            "episode_bytes_estimate": int(bytes_per_frame * lengths[rows].mean()),
        }
    ratio = groups["long"]["mean_bytes"] / groups["short"]["mean_bytes"]
    share = groups["long"]["max_bytes"] / groups["long"]["episode_bytes_estimate"]
    return {
        "dataset": str(path),
        "frames": len(ds),
        "shard_bytes": shard_bytes,
        "groups": groups,
        "long_over_short": ratio,
        "long_max_share_of_episode": share,
        "independent_of_length": bool(ratio < 1.5),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_bytes.json")
    parser.add_argument("--only", choices=["small", "large"], action="append")
    parser.add_argument("--quick", action="store_true", help="the tiny datasets of run.py --quick")
    args = parser.parse_args(argv)
    if not Path("/proc/self/io").exists():
        print("bench_bytes.py needs Linux's /proc/self/io", file=sys.stderr)
        return 1
    results = {}
    for label, spec in specs_for(args.quick, args.only).items():
        _, path = bench_data.prepare(spec, args.cache, workers=2)
        results[label] = r = measure(path)
        s, lg = r["groups"]["short"], r["groups"]["long"]
        print(
            f"{label}: {s['mean_bytes'] / 1024:.1f} KB/sample in episodes of "
            f"{s['episode_lengths']} frames, {lg['mean_bytes'] / 1024:.1f} KB/sample in episodes "
            f"of {lg['episode_lengths']} frames (ratio {r['long_over_short']:.2f}; worst sample "
            f"{100 * r['long_max_share_of_episode']:.1f}% of a long episode's bytes)"
        )
    from jaxload.tools import bench

    doc = {
        "command": "python benchmarks/bench_bytes.py " + " ".join(argv or sys.argv[1:]),
        "machine": bench.machine_info(),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
