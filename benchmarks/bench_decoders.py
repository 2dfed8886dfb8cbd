"""The loader's decode against its ceiling: frames/s per core, decoders created per 1,000
batches, and the share of the ceiling the loader's decode reaches (issue #46).

    python benchmarks/bench_decoders.py                      # small (96x128) and large (480x640)
    python benchmarks/bench_decoders.py --quick --only small  # tiny, seconds
    python benchmarks/bench_decoders.py PATH [PATH ...]      # converted datasets

For each dataset, random batches of 32 samples (every camera, windows of [-2, 0, +3]
frames, padded slots included) are decoded the way the loader decodes them: the batch's
mp4 per camera group (`jaxload.format.mp4`), opened by a decoder of the current backend,
`frames_at` the batch's frame indices. The ceiling is the same frames decoded in order by
one decoder per mp4: every frame of the GOPs the batches touched, with no seek. The loader's
rate counts the distinct frames each batch asks of its decoders (a frame served to several
slots, or a padded slot, counts once), so its share of the ceiling is what random access
costs: the GOPs' leading frames decoded and not served, the mp4s and decoders opened per
batch, the record reads and the reader's Python. Both sides
decode in this one thread, in alternating rounds, and the best round of each counts.

The rates are frames per CPU second of this process (`torch.set_num_threads(1)`: one
core). The decoders counted are those the loader's decode opens (one torchcodec
VideoDecoder each), recorded once (`jaxload.tools.bench.record_decode_calls`). On the CPU
only: the devices' decode keeps its frames on the devices, which this dataset-level
measurement does not; on a GPU host `benchmarks/profile_loader.py --decode-device cuda`
(step 3b of scripts/gpu_check.sh) gives the devices' decoders per 1,000 batches and their
time per call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import jaxload  # noqa: E402
from benchmarks import bench_data  # noqa: E402
from jaxload.decode.torchcodec_import import video_decoder_class  # noqa: E402
from jaxload.tools.bench import record_decode_calls  # noqa: E402

RESULTS = REPO_ROOT / "benchmarks" / "results_decoders.json"
WINDOW = (-2, 0, 3)  # frames around each sample: slots before an episode's start are padded
BATCH = 32


def measure(path: Path, batches: int, rounds: int, seed: int = 0) -> dict:
    """The loader's decode and the ceiling on `path`, alternating `rounds` times.

    Args:
        path: a converted jaxload dataset with video.
        batches: batches of 32 random samples per round.
        rounds: rounds per side; the best of each side counts.

    Example:
        measure(Path("runs/bench/small-jaxload"), batches=20, rounds=3)["share_of_ceiling"]
    """
    meta = jaxload.open(path).meta
    if not meta.video_keys:
        raise ValueError(f"{path}: no video camera to decode")
    windows = {k: [d / meta.fps for d in WINDOW] for k in meta.video_keys}
    ds = jaxload.open(path, delta_timestamps=windows)
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, len(ds), BATCH).tolist() for _ in range(batches)]
    served = len(meta.video_keys) * len(WINDOW) * BATCH * batches
    # Not timed: imports, and what the loader's decode opens (the same in every round).
    calls = record_decode_calls(ds, rows)
    distinct = sum(len(set(indices)) for call in calls for indices in call.indices)
    seconds: dict[str, list[float]] = {"loader": [], "ceiling": []}
    ceiling_frames = 0
    for r in range(rounds):
        for side in ("loader", "ceiling") if r % 2 == 0 else ("ceiling", "loader"):
            start = time.process_time()
            if side == "loader":
                for batch_rows in rows:
                    ds.__getitems__(batch_rows)
            else:
                ceiling_frames = sum(_decode_in_order(call.mp4) for call in calls)
            seconds[side].append(time.process_time() - start)
    loader_s, ceiling_s = min(seconds["loader"]), min(seconds["ceiling"])
    return {
        "dataset": str(path),
        "frames_served_per_round": served,
        "distinct_frames_per_round": distinct,
        "ceiling_frames_per_round": ceiling_frames,
        "loader_frames_per_s": distinct / loader_s,
        "ceiling_frames_per_s": ceiling_frames / ceiling_s,
        "share_of_ceiling": (distinct / loader_s) / (ceiling_frames / ceiling_s),
        "decoders_per_1000_batches": 1000 * len(calls) / batches,
        "seconds": seconds,
    }


def _decode_in_order(mp4: bytes) -> int:
    """Every frame of `mp4`, in stream order, by one decoder: the frame count."""
    decoder = video_decoder_class()(mp4, seek_mode="exact", dimension_order="NHWC")
    return len(decoder.get_frames_in_range(0, len(decoder)).data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="*", type=Path, help="converted datasets")
    parser.add_argument(
        "--cache", type=Path, default=bench_data.DEFAULT_CACHE,
        help="where the benchmark datasets are written and kept (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument("--only", choices=["small", "large"], action="append", help="one size")
    parser.add_argument("--quick", action="store_true", help="the tiny datasets of run.py --quick")
    parser.add_argument("--batches", type=int, default=20, help="batches of 32 per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side (best counts)")
    parser.add_argument(
        "--out", type=Path, default=None,
        help="the results file (default: benchmarks/results_decoders.json, the one "
        "benchmarks/RESULTS.md cites; with --quick, results_decoders_quick.json under --cache)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    import torch

    from jaxload.tools import bench

    torch.set_num_threads(1)  # one core: torchcodec's own threads would blur "per core"
    if args.out is None:  # a quick run never overwrites the figures RESULTS.md cites
        args.out = args.cache / "results_decoders_quick.json" if args.quick else RESULTS
    print(
        f"{'quick: ' if args.quick else ''}batches of {BATCH}, {args.batches} per round, "
        f"{args.rounds} rounds per side, one core",
        flush=True,
    )
    if args.datasets:
        paths = {p.name: p for p in args.datasets}
    else:
        # The converter's default: the sources' AV1, copied.
        specs = bench_data.specs_for(args.quick, args.only)
        paths = {k: bench_data.prepare(s, args.cache, workers=2)[1] for k, s in specs.items()}
    results = {}
    for label, path in paths.items():
        got = results[label] = measure(path, args.batches, args.rounds)
        print(
            f"{label}: the loader decodes {got['loader_frames_per_s']:,.0f} distinct frames/s "
            "per core; "
            f"the ceiling decodes {got['ceiling_frames_per_s']:,.0f} frames/s in order; "
            f"the loader reaches {got['share_of_ceiling']:.2f} of the ceiling; "
            f"{got['decoders_per_1000_batches']:,.0f} decoders per 1,000 batches",
            flush=True,
        )
    doc = {
        "command": "python benchmarks/bench_decoders.py " + " ".join(argv or sys.argv[1:]),
        "machine": bench.machine_info(),
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "results": results,
    }
    args.out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
