"""benchmarks/bench_convert.py runs end to end at tiny size, so it cannot rot."""

import pytest

from benchmarks import bench_convert

pytestmark = pytest.mark.processes


def test_bench_convert_tiny(tmp_path, capsys):
    results = bench_convert.main(
        ["--tiny", "--cache", str(tmp_path), "--json", str(tmp_path / "r.json")]
    )
    throughput, balance = results["throughput"], results["balance"]
    for workers in (1, 2):
        row = throughput[f"workers_{workers}"]
        assert row["input_mb_per_s"] > 0 and row["episodes_per_s"] > 0
    assert throughput["speedup_2_over_1"] > 0
    assert balance["min_length"] == 10 and balance["max_length"] == 3000
    for row in balance["workers"].values():
        assert 1.0 <= row["lpt_units"] <= row["round_robin_units"]
    out = capsys.readouterr().out
    assert "2 workers / 1 worker" in out and "| 16 |" in out
    assert (tmp_path / "r.json").is_file()
