"""What parsing a parquet footer costs in pyarrow, per column chunk (issue #43, item 4).

LeRobot writes `meta/episodes` 10 episodes per row group with ~100 columns (per-episode
stats), so 100,000 episodes make 10,000 row groups and ~1 M column chunks: a 106 MB footer.
pyarrow parses a footer whole (`FileMetaData`, before any column can be chosen), so the
process that reads it holds every column chunk's parsed metadata at once. This writes
parquet files of that shape (float64 columns with statistics, as lerobot's) and measures,
each in a fresh process, the peak RSS that opening one adds:

    python benchmarks/footer_memory.py --row-groups 1000 2000 5000 --columns 100
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = r"""
import json, os, sys
import pyarrow.parquet as pq
def peak_kb():  # this process's own high-water mark (ru_maxrss would carry the parent's over exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
path = sys.argv[1]
before = peak_kb()
metadata = pq.ParquetFile(path).metadata
after = peak_kb()
with open(path, "rb") as f:
    f.seek(-8, os.SEEK_END)
    footer = int.from_bytes(f.read(4), "little")
print(json.dumps({"row_groups": metadata.num_row_groups, "columns": metadata.num_columns,
                  "footer_bytes": footer, "parsed_bytes": (after - before) * 1024}))
"""


def write(path: Path, row_groups: int, columns: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 10  # lerobot's episodes per row group
    table = pa.table(
        {"episode_index": np.arange(rows)}
        | {f"stats/feature_{c}": np.random.default_rng(c).random(rows) for c in range(columns)}
    )
    with pq.ParquetWriter(path, table.schema) as writer:
        for _ in range(row_groups):
            writer.write_table(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--row-groups", type=int, nargs="+", default=[1000, 2000, 5000])
    parser.add_argument("--columns", type=int, default=100)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jaxload-footer-") as tmp:
        for row_groups in args.row_groups:
            path = Path(tmp) / f"{row_groups}.parquet"
            write(path, row_groups, args.columns)
            out = subprocess.run(
                [sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True
            )
            got = json.loads(out.stdout.strip().splitlines()[-1])
            chunks = got["row_groups"] * got["columns"]
            print(
                f"{got['row_groups']:,} row groups x {got['columns']} columns = {chunks:,} column "
                f"chunks: footer {got['footer_bytes'] / 1e6:.1f} MB, parsed +"
                f"{got['parsed_bytes'] / 1e6:.0f} MB ({got['parsed_bytes'] / chunks:,.0f} B per "
                f"column chunk, {got['parsed_bytes'] / got['footer_bytes']:.1f}x the footer)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
