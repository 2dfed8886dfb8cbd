"""What verifying every record costs: samples/s of batched reads with and without the
xxh3 check, side by side in one run, and the per-batch validation besides (each frame
asked for lies in its GOP record, `EncodedFrames._check_frames`).

"Without" replaces the check by stripping the 8 checksum bytes (the only way to read a
checksummed record unverified; there is no user switch), so the difference is exactly the
hashing. Reads go through `JaxloadDataset.__getitems__` (read + verify + decode, as a
loader worker does), batches of 32 random positions with benchmark windows, on the
benchmark's small (96x128) and large (480x640) datasets (cached under runs/bench/), the
two modes alternating for `--rounds` rounds; medians.

    python benchmarks/bench_checksum.py [--rounds 5] [--batches 20] [--only small]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import jaxload  # noqa: E402
from benchmarks import bench_data  # noqa: E402
from benchmarks.bench_data import LARGE, SMALL  # noqa: E402
from jaxload.format import layout  # noqa: E402
from jaxload.tools.bench.windows import bench_windows  # noqa: E402

BATCH = 32


@contextlib.contextmanager
def unverified():
    """Records are stripped of their checksum bytes, not checked."""

    def strip(stored, seed, shard, record):
        return stored[: -layout.RECORD_CHECK_BYTES]

    with mock.patch.object(layout, "unseal_record", strip):
        yield


def read_batches(ds, batches: list[np.ndarray]) -> float:
    started = time.perf_counter()
    for positions in batches:
        ds.__getitems__(positions.tolist())
    return time.perf_counter() - started


def measure(path: Path, rounds: int, count: int) -> dict:
    ds = jaxload.open(path, delta_timestamps=bench_windows(jaxload.open(path)))
    assert ds.info.checked, f"{path}: records without checksums; delete it to regenerate"
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(ds), BATCH) for _ in range(count)]
    read_batches(ds, batches[:3])  # warm-up: decoders, page cache
    seconds: dict[str, list[float]] = {"verified": [], "unverified": []}
    for _ in range(rounds):
        seconds["verified"].append(read_batches(ds, batches))
        with unverified():
            seconds["unverified"].append(read_batches(ds, batches))
    rate = {k: BATCH * count / statistics.median(v) for k, v in seconds.items()}
    hashed = hashed_per_batch(ds, batches)
    checked = validation_per_batch(ds, batches)
    batch_ms = 1e3 * BATCH / rate["verified"]
    return rate | {
        "verified_over_unverified": rate["verified"] / rate["unverified"],
        "bytes_hashed_per_batch": hashed["bytes"],
        "hash_ms_per_batch": hashed["ms"],
        "hash_share_of_verified_batch": hashed["ms"] / batch_ms,
        "validation_ms_per_batch": checked,
        "checks_share_of_verified_batch": (hashed["ms"] + checked) / batch_ms,
    }


def validation_per_batch(ds, batches: list[np.ndarray]) -> float:
    """Milliseconds per batch spent checking decoded frames against their GOP records."""
    from jaxload.decode.frames import EncodedFrames

    real, spent = EncodedFrames._check_frames, [0.0]

    def timed(self, counts):
        started = time.perf_counter()
        try:
            return real(self, counts)
        finally:
            spent[0] += time.perf_counter() - started

    with mock.patch.object(EncodedFrames, "_check_frames", timed):
        read_batches(ds, batches)
    return 1e3 * spent[0] / len(batches)


def hashed_per_batch(ds, batches: list[np.ndarray]) -> dict:
    """Bytes the check hashes per batch, and the time the hashing alone takes."""
    seen: list[bytes] = []
    real = layout.unseal_record

    def record(stored, seed, shard, number):
        seen.append(stored)
        return real(stored, seed, shard, number)

    with mock.patch.object(layout, "unseal_record", record):
        read_batches(ds, batches)
    started = time.perf_counter()
    for _ in range(5):
        for stored in seen:
            layout.xxh3_64_intdigest(memoryview(stored)[: -layout.RECORD_CHECK_BYTES], seed=1)
    seconds = (time.perf_counter() - started) / 5
    return {"bytes": sum(map(len, seen)) / len(batches), "ms": 1e3 * seconds / len(batches)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--only", choices=["small", "large"], action="append")
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    args = parser.parse_args()
    results = {}
    for spec in (SMALL, LARGE):
        if args.only and spec.name not in args.only:
            continue
        _, dataset = bench_data.prepare(spec, args.cache)
        results[spec.name] = measure(dataset, args.rounds, args.batches)
        print(spec.name, json.dumps(results[spec.name]), flush=True)
    (REPO_ROOT / "benchmarks" / "results_checksum.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
