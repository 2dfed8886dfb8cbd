"""Soak: a loader whose Grain workers are SIGKILLed (what the OOM killer does) every minute
still serves exactly the undisturbed run's batches.

    python benchmarks/soak_worker_kill.py --minutes 10          # issue #33's soak
    python benchmarks/soak_worker_kill.py --minutes 2 --out benchmarks/results_soak.json

A loader with worker processes runs for `--minutes`; every `--kill-every` seconds one of
its live workers (found in /proc, chosen at random) gets SIGKILL. Beside it, in the same
process, a loader without workers is the undisturbed run. Every batch served is compared
key by key with the undisturbed run's batch at the same position, and `get_state()` with
its state after every batch; a `WorkerDiedError` must name the position not yet served,
and the next `next()` must serve it. Prints (and with `--out` writes) a JSON summary; the
exit status is 1 when any batch or state differed, or an error other than a worker's
death came out. Dataset: `--dataset` (a jaxload dataset), else the bundled LeRobot example
(examples/data/lerobot_av1_demo), converted once into a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from jaxload.workers.processes import worker_pids  # noqa: E402

EXAMPLE = REPO_ROOT / "examples" / "data" / "lerobot_av1_demo"


class Killer:
    """A thread that SIGKILLs one live worker every `every_s` seconds, chosen by `seed`,
    once the loader served a batch since the last kill (`served()`: a kill lands on a
    running pipeline, not on one still starting its workers)."""

    def __init__(self, every_s: float, seed: int = 0, served=lambda: 0):
        self.every_s, self.rng, self.served = every_s, random.Random(seed), served
        self._last = -1  # batches served at the last kill
        self.kills: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="soak-killer")

    def __enter__(self) -> Killer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            pids = worker_pids()
            if not pids or self.served() == self._last:
                continue  # between pipelines, or still restarting: the next tick tries again
            self._last = self.served()
            pid = self.rng.choice(pids)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills.append({"at_s": round(time.monotonic() - self.started, 1), "pid": pid})


def same_batch(a: dict, b: dict) -> bool:
    return sorted(a) == sorted(b) and all(
        np.asarray(a[k]).dtype == np.asarray(b[k]).dtype and np.array_equal(a[k], b[k]) for k in a
    )


def soak(
    path: str | os.PathLike,
    *,
    minutes: float,
    kill_every_s: float = 60.0,
    workers: int = 2,
    batch_size: int = 8,
    seed: int = 0,
    log=print,
) -> dict[str, Any]:
    """Runs the soak in this process; returns its summary (`ok`: nothing differed)."""
    import jaxload
    from jaxload.errors import WorkerDiedError

    windows = {"action": [k / 10 for k in range(4)], "observation.state": [-0.1, 0.0]}
    kw = dict(
        global_batch_size=batch_size,
        seed=seed,
        delta_timestamps=windows,
        host_index=0,
        host_count=1,
    )
    undisturbed = jaxload.make_loader(path, options=jaxload.PipelineOptions(num_workers=0), **kw)
    options = jaxload.PipelineOptions(num_workers=workers, read_threads=1, prefetch=2)
    loader = jaxload.make_loader(path, options=options, **kw)
    served = deaths = wrong_batches = wrong_states = 0
    other_errors: list[str] = []
    restarts: list[float] = []
    died_at: float | None = None
    deadline = time.monotonic() + minutes * 60
    with Killer(kill_every_s, seed, lambda: served) as killer:
        while time.monotonic() < deadline:
            before = loader.get_state()["position"]
            try:
                batch = next(loader)
            except WorkerDiedError as e:
                deaths += 1
                position = loader.get_state()["position"]
                log(f"{time.monotonic() - killer.started:7.1f} s  {str(e)[:160]}")
                if position != before or e.position is None or e.position < position:
                    wrong_states += 1
                    log(f"  WRONG: state {position}, before {before}, error at {e.position}")
                died_at = time.monotonic()
                continue
            except Exception as e:  # any other error fails the soak
                other_errors.append(f"{type(e).__name__}: {str(e)[:300]}")
                log(f"  OTHER ERROR {other_errors[-1]}")
                if len(other_errors) >= 3:
                    break
                continue
            if died_at is not None:
                restarts.append(time.monotonic() - died_at)
                died_at = None
            want = next(undisturbed)
            served += 1
            if not same_batch(batch, want):
                wrong_batches += 1
                log(f"  WRONG batch at position {before}")
            if loader.get_state() != undisturbed.get_state():
                wrong_states += 1
                log(f"  WRONG state after position {before}: {loader.get_state()}")
    loader.close()
    undisturbed.close()
    elapsed = time.monotonic() - killer.started
    return {
        "minutes": round(elapsed / 60, 2),
        "kill_every_s": kill_every_s,
        "workers": workers,
        "batch_size": batch_size,
        "batches_served": served,
        "batches_per_s": round(served / elapsed, 2),
        "kills": len(killer.kills),
        "worker_died_errors": deaths,
        "restart_s_mean": round(float(np.mean(restarts)), 2) if restarts else None,
        "restart_s_max": round(float(np.max(restarts)), 2) if restarts else None,
        "wrong_batches": wrong_batches,
        "wrong_states": wrong_states,
        "other_errors": other_errors,
        "final_position": served * batch_size,
        "ok": wrong_batches == 0 and wrong_states == 0 and not other_errors,
    }


def converted_example(directory: str) -> str:
    from jaxload.converters.convert import convert

    out = os.path.join(directory, "demo")
    convert(EXAMPLE, out, workers=1, progress=False)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds between kills")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", help="a jaxload dataset (default: the bundled example)")
    parser.add_argument("--out", help="also write the JSON summary here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jaxload-soak-") as tmp:
        path = args.dataset or converted_example(tmp)
        summary = soak(
            path,
            minutes=args.minutes,
            kill_every_s=args.kill_every,
            workers=args.workers,
            batch_size=args.batch_size,
            seed=args.seed,
        )
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
