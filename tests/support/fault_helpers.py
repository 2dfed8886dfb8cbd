"""Batch transforms that break the batch_transform contract, and a trainer for the
process-fault tests (tests/workers/test_processes.py). Module level, so Grain worker
processes can unpickle the transforms.

Run as a script, the trainer builds a loader with 2 workers over a dataset, takes 3
batches, prints "READY <pid>" and sleeps until it is killed:

    python -m tests.support.fault_helpers DATASET
"""

from __future__ import annotations

import os
import sys
import threading
import time


def returns_none(batch: dict) -> None:
    """A transform that forgot its `return`."""
    batch["extra"] = batch["index"]


def drops_rows(batch: dict) -> dict:
    return {k: v[:1] for k, v in batch.items()}


def returns_a_list(batch: dict) -> dict:
    return {**batch, "index": batch["index"].tolist()}


class FailsOnce:
    """Raises OSError once: for the batch whose first row is frame `index`, while the file
    `flag` exists (a file, so that it is once across worker processes too)."""

    def __init__(self, flag: str, index: int):
        self.flag, self.index = flag, int(index)

    def __call__(self, batch: dict) -> dict:
        if int(batch["index"][0]) != self.index:
            return batch
        try:
            os.unlink(self.flag)
        except FileNotFoundError:
            return batch
        raise OSError(f"a transient failure reading the batch of frame {self.index}")


class StuckOn:
    """Never returns from its `call`-th call in a process (a transform stuck for good)."""

    def __init__(self, call: int):
        self.call, self.calls = call, 0

    def __call__(self, batch: dict) -> dict:
        self.calls += 1
        if self.calls == self.call:
            threading.Event().wait()
        return batch


def main(path: str) -> None:
    import jaxload

    loader = jaxload.make_loader(
        path,
        global_batch_size=4,
        options=jaxload.PipelineOptions(num_workers=2, read_threads=1),
        host_index=0,
        host_count=1,
        delta_timestamps={"observation.image": [-0.1, 0.0]},
    )
    for _ in range(3):
        next(loader)
    print("READY", os.getpid(), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1])
