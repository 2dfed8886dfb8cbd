"""Tooling beside the runtime (a trainer never imports these): benchmarks (`bench`),
loader settings from measurements (`autotune`), evaluation sharding and its launcher
(`eval`), and the dataset checker (`doctor`)."""
