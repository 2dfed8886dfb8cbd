"""A benchmark that never finishes, for tests/tools/test_gpu_check.py: scripts/gpu_check.sh
runs it in place of benchmarks/bench_gpu.py (GPU_BENCH) and must go on to the next size.

    python tests/support/stuck_bench.py --sizes small --deadline 3 --out results.json

It writes a first stage's results to --out, as bench_gpu.py does after each stage, starts a
child that sleeps with the same stdout and stderr (a Grain worker left behind) and writes
the child's pid to $STUCK_BENCH_PIDS, then hangs. Size "small" hangs until faulthandler's
--deadline ends it, as bench_gpu.py's does; any other size ignores the deadline, so only
the script's own kill ends it.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import subprocess
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", nargs="+")
    p.add_argument("--deadline", type=float, default=0)
    p.add_argument("--out")
    args, _ = p.parse_known_args()
    size = args.sizes[0]
    stage = {"size": size, "devices": ["cpu:0"], "accuracy_max_abs": {"h264": 2}}
    with open(args.out, "w") as f:
        json.dump([stage], f)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["STUCK_BENCH_PIDS"], "a") as f:
        f.write(f"{child.pid}\n")
    print(f"[stuck] {size}: child {child.pid}", flush=True)
    if size == "small" and args.deadline:
        faulthandler.dump_traceback_later(args.deadline, exit=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
