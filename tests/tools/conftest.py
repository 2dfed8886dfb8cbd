"""Fixtures of the benchmark tests (tests/tools/test_bench.py, tests/tools/bench/): a tiny
benchmark dataset, prepared as the benchmarks prepare theirs (benchmarks/bench_data.py,
imported only when a test asks for it)."""

import pytest


def tiny_small():
    """The benchmark's "small" dataset at tiny size: 3 episodes of 10..30 frames, 96x128."""
    from benchmarks.bench_data import DatasetSpec

    return DatasetSpec("small", height=96, width=128, episodes=3, min_length=10, max_length=30)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("bench_cache")


@pytest.fixture(scope="module")
def small(cache):
    from benchmarks import bench_data

    return bench_data.prepare(tiny_small(), cache, workers=1)
