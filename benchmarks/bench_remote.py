"""Local vs remote, side by side in one run: the same converted dataset read from disk and
from a real S3-compatible server on loopback (moto's server mode, a subprocess, behind a
layer that adds `--latency-ms` per request; tests/support/s3_server.py), with a record cache of
`--cache-fraction` of the dataset's bytes: ranges through presigned URLs (the default where
the store signs them), through s3fs (`signed_urls=False`), and with the cache on disk
(`RemoteOptions(cache_dir=...)`), and the first again with no injected latency (what the
latency, rather than the work of fetching, costs). Each loader runs with its defaults
(0 workers on 2 cores; read threads: 2 local and with the disk cache, 3 remote with the
cache in memory, `PipelineOptions.resolve`).

Reports samples/s of each, remote/local, bytes and requests per sample, the CPU seconds
the client and the server spent per batch, the live cache hit rate, and the hit rates the furthest-next-use (optimal) and LRU policies reach at the same
budget on the loader's real future access sequence (`jaxload.storage.cache.simulate`).

    python benchmarks/bench_remote.py                      # 50 ms, cache 10%
    python benchmarks/bench_remote.py --latency-ms 20 --batches 60
    python benchmarks/bench_remote.py --height 180 --width 320 --episodes 24   # DROID-sized frames
    python benchmarks/bench_remote.py --height 224 --width 224 --episodes 24   # a policy's input size
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import jaxload  # noqa: E402
from benchmarks import bench_data  # noqa: E402
from jaxload import format as fmt  # noqa: E402
from jaxload.storage.cache import simulate  # noqa: E402
from jaxload.storage.remote import RemoteOptions  # noqa: E402
from tests.support.s3_server import S3Server  # noqa: E402

WINDOWS = {"action": [k / 30 for k in range(16)]}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shard_bytes(root: Path) -> int:
    info = fmt.read_info(root)
    return sum((root / fmt.shard_path(s)).stat().st_size for s in range(info.num_shards))


def run(path, batches: int, batch_size: int, warmup: int, **kwargs) -> tuple[float, object, float]:
    """Samples/s over `batches` batches after `warmup` ones, the loader (still open) and the
    seconds from opening it to its first batch."""
    opened = time.perf_counter()
    loader = jaxload.make_loader(
        path,
        global_batch_size=batch_size,
        seed=0,
        delta_timestamps=WINDOWS,
        options=jaxload.PipelineOptions(num_workers=0),  # read_threads: the loader's (docstring)
        **kwargs,
    )
    next(loader)
    first_s = time.perf_counter() - opened
    for _ in range(warmup - 1):
        next(loader)
    began = time.perf_counter()
    for _ in range(batches):
        next(loader)
    return batches * batch_size / (time.perf_counter() - began), loader, first_s


def access_sequence(root: Path, batches: int, batch_size: int) -> tuple[list, dict]:
    """The (shard, record) reads of the loader's first batches, in order, and their sizes."""
    loader = jaxload.make_loader(
        root,
        global_batch_size=batch_size,
        seed=0,
        delta_timestamps=WINDOWS,
        options=jaxload.PipelineOptions(num_workers=0),
    )
    ds = loader.datasets[0]
    accesses = []
    for k in range(batches):
        _, positions = loader.stream.locate(np.arange(k * batch_size, (k + 1) * batch_size))
        accesses += [tuple(p) for p in ds.record_keys(positions.tolist()).tolist()]
    info = fmt.read_info(root)
    sizes = {}
    for shard in range(info.num_shards):
        offsets = np.fromfile(root / fmt.offsets_path(shard), dtype="<u8").astype(np.int64)
        for record in range(len(offsets) - 1):
            sizes[(shard, record)] = int(offsets[record + 1] - offsets[record])
    return accesses, sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--cache-fraction", type=float, default=0.10)
    parser.add_argument("--batches", type=int, default=200, help="timed batches")
    parser.add_argument(
        "--warmup",
        type=int,
        default=20,
        help="batches read before timing (the startup, while the first fetches are planned)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_remote.json"
    )
    args = parser.parse_args(argv)

    spec = bench_data.DatasetSpec(
        "remote", height=args.height, width=args.width, episodes=args.episodes
    )
    _, root = bench_data.prepare(spec, args.cache)
    total = shard_bytes(root)
    budget = int(args.cache_fraction * total)
    print(
        f"dataset {root.name}: {total / 1e6:.1f} MB of shards; cache budget {budget / 1e6:.2f} MB"
    )

    server = S3Server.start(latency_s=args.latency_ms / 1000)
    # jaxload never deletes a user's cache_dir (only its files): the benchmark's is its own
    cache_holder = tempfile.TemporaryDirectory(prefix="bench-remote-cache-")
    cache_dir = cache_holder.name
    modes = {
        "local": {},
        "remote": {},  # presigned URLs through urllib3, cache in memory
        "remote_fsspec": {"signed_urls": False},  # every request through s3fs
        "remote_disk": {"cache_dir": cache_dir},
        "remote_0ms": {},  # as "remote" with no injected latency: what the latency costs
    }
    rates: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    first: dict[str, list[float]] = {m: [] for m in modes}
    threads: dict[str, int] = {}
    remote_stats = []
    try:
        server.upload(str(root), "s3://bench/ds")
        for _ in range(args.repeats):  # alternate, so all see the same machine
            for mode, extra in modes.items():
                server.reset_counters()
                server.set(latency_s=0.0 if mode == "remote_0ms" else args.latency_ms / 1000)
                client, served = cpu_seconds(os.getpid()), cpu_seconds(server.process.pid)
                if mode == "local":
                    rate, loader, first_s = run(root, args.batches, args.batch_size, args.warmup)
                else:
                    options = RemoteOptions(cache_bytes=budget, log_every_s=0, **extra)
                    rate, loader, first_s = run(
                        "s3://bench/ds",
                        args.batches,
                        args.batch_size,
                        args.warmup,
                        storage_options=server.storage_options(),
                        remote=options,
                    )
                    stats = loader.stats["s3://bench/ds"] | {"server": server.counters()}
                    if mode == "remote":
                        remote_stats.append(stats)
                threads[mode] = loader.options.read_threads
                loader.close()
                batches = args.batches + args.warmup
                cpu[mode].append(
                    (
                        (cpu_seconds(os.getpid()) - client) / batches,
                        (cpu_seconds(server.process.pid) - served) / batches,
                    )
                )
                rates[mode].append(rate)
                first[mode].append(first_s)
    finally:
        server.stop()
        cache_holder.cleanup()
    local_rates, remote_rates = rates["local"], rates["remote"]

    samples = (args.batches + args.warmup) * args.batch_size
    last = remote_stats[-1]
    accesses, sizes = access_sequence(root, args.batches + args.warmup, args.batch_size)
    needed = sum(sizes[a] for a in accesses)
    policies = {p: simulate(accesses, sizes, budget, p) for p in ("optimal", "lru")}
    result = {
        "dataset": root.name,
        "shard_bytes": total,
        "latency_ms": args.latency_ms,
        "cache_budget_bytes": budget,
        "local_samples_per_s": statistics.median(local_rates),
        "remote_samples_per_s": statistics.median(remote_rates),
        "remote_fsspec_samples_per_s": statistics.median(rates["remote_fsspec"]),
        "remote_disk_samples_per_s": statistics.median(rates["remote_disk"]),
        "remote_0ms_samples_per_s": statistics.median(rates["remote_0ms"]),
        "local_runs": local_rates,
        "remote_runs": remote_rates,
        "remote_fsspec_runs": rates["remote_fsspec"],
        "remote_disk_runs": rates["remote_disk"],
        "remote_0ms_runs": rates["remote_0ms"],
        "first_batch_s": {m: statistics.median(v) for m, v in first.items()},
        "read_threads": threads,
        "cpu_s_per_batch": {  # (client, server), median over repeats
            m: [statistics.median(c[i] for c in cpu[m]) for i in (0, 1)] for m in modes
        },
        "bytes_fetched_per_sample": last["server"]["bytes"] / samples,
        "bytes_needed_per_sample": needed / samples,
        "requests_per_sample": last["server"]["requests"] / samples,
        "live_cache_hit_rate": last["cache_hit_rate"],
        "cache_early_evictions": last["cache_early_evictions"],
        "sweep_period": last["sweep_period"],
        "coalesce_bytes": last["coalesce_bytes"],
        "measured_latency_ms": last["latency_ms"],
        "simulated": policies,
        "remote_stats": remote_stats,
    }
    result["remote_over_local"] = result["remote_samples_per_s"] / result["local_samples_per_s"]
    result["remote_disk_over_local"] = (
        result["remote_disk_samples_per_s"] / result["local_samples_per_s"]
    )
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"samples/s: local {result['local_samples_per_s']:.0f}, remote "
        f"{result['remote_samples_per_s']:.0f} at {args.latency_ms:.0f} ms "
        f"(remote/local {result['remote_over_local']:.2f}); through s3fs "
        f"{result['remote_fsspec_samples_per_s']:.0f} "
        f"({result['remote_fsspec_samples_per_s'] / result['local_samples_per_s']:.2f}); disk cache "
        f"{result['remote_disk_samples_per_s']:.0f} ({result['remote_disk_over_local']:.2f}); "
        f"runs local {local_rates}, remote {remote_rates}, s3fs {rates['remote_fsspec']}, "
        f"disk {rates['remote_disk']}"
    )
    print(
        f"the same remote read with no injected latency: {result['remote_0ms_samples_per_s']:.0f} "
        f"samples/s (remote at {args.latency_ms:.0f} ms / at 0 ms: "
        f"{result['remote_samples_per_s'] / result['remote_0ms_samples_per_s']:.2f}; below 1: "
        f"latency not hidden); runs {rates['remote_0ms']}"
    )
    print(
        "read threads (the loader's defaults): " + ", ".join(f"{m} {t}" for m, t in threads.items())
    )
    print(
        "seconds from opening to the first batch: "
        + ", ".join(f"{m} {v:.2f}" for m, v in result["first_batch_s"].items())
    )
    print(
        "CPU ms per batch (client, server): "
        + ", ".join(
            f"{m} ({1e3 * c:.1f}, {1e3 * v:.1f})" for m, (c, v) in result["cpu_s_per_batch"].items()
        )
    )
    print(
        f"per sample: {result['bytes_fetched_per_sample'] / 1e3:.1f} KB fetched for "
        f"{result['bytes_needed_per_sample'] / 1e3:.1f} KB of records read, "
        f"{result['requests_per_sample']:.3f} requests; live cache hit rate "
        f"{result['live_cache_hit_rate']:.1%}; sweep period {result['sweep_period']} batches, "
        f"{result['cache_early_evictions']} records evicted before their use"
    )
    print(
        f"same budget, same order, simulated: optimal (furthest next use) hit rate "
        f"{policies['optimal']['hit_rate']:.1%} ({policies['optimal']['fetched_bytes'] / samples / 1e3:.1f} KB/sample), "
        f"LRU {policies['lru']['hit_rate']:.1%} ({policies['lru']['fetched_bytes'] / samples / 1e3:.1f} KB/sample)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
