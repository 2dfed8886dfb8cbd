"""Benchmark scripts and their helpers (see benchmarks/RESULTS.md)."""
