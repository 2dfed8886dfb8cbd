"""Throughput benchmarks: jaxload's loader, its decode limit and LeRobotDataset, side by side.

What `jaxload bench` and `benchmarks/*.py` use, one concern per module:

    windows   the benchmark's delta_timestamps and frames per sample
    measure   timing an iterator of batches, CPU time, peak RSS of the process tree
    isolate   running a measurement in a fresh process
    loader    jaxload's loader, measured (`measure_jaxload`)
    lerobot   LeRobotDataset in a torch DataLoader, measured (optional deps; not re-exported)
    limit     the decode limit: the reader's decodes, recorded through the decode backend
              and replayed with torchcodec alone
    run       one benchmark (`run_bench`): all of the above in alternating rounds
    report    `BenchReport`, its table, JSON and chart

Example:
    >>> from jaxload.tools import bench
    >>> report = bench.run_bench("out/my_dataset", num_workers=2, batch_size=32, seconds=10)
    >>> print(bench.format_table([report]))
"""

from jaxload.tools.bench.isolate import in_fresh_process
from jaxload.tools.bench.limit import (
    DecodeCall,
    DecodeLimit,
    Pass,
    decode_limit,
    record_decode_calls,
    replay,
    replay_processes,
)
from jaxload.tools.bench.loader import measure_jaxload, positions_of
from jaxload.tools.bench.measure import (
    RssSampler,
    Throughput,
    Timing,
    cpu_delta,
    machine_info,
    measure_iterator,
    throughput,
    tree_cpu_seconds,
    tree_rss,
)
from jaxload.tools.bench.report import BenchReport, format_table, plot, read_json, write_json
from jaxload.tools.bench.run import median_throughput, run_bench
from jaxload.tools.bench.windows import Windows, bench_windows, frames_per_sample

__all__ = [
    "BenchReport",
    "DecodeCall",
    "DecodeLimit",
    "Pass",
    "RssSampler",
    "Throughput",
    "Timing",
    "Windows",
    "bench_windows",
    "cpu_delta",
    "decode_limit",
    "format_table",
    "frames_per_sample",
    "in_fresh_process",
    "machine_info",
    "measure_iterator",
    "measure_jaxload",
    "median_throughput",
    "plot",
    "positions_of",
    "read_json",
    "record_decode_calls",
    "replay",
    "replay_processes",
    "run_bench",
    "throughput",
    "tree_cpu_seconds",
    "tree_rss",
    "write_json",
]
