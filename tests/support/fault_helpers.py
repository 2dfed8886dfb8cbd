"""Batch transforms that break the batch_transform contract, and a trainer for the
process-fault tests (tests/pipeline/test_worker_faults.py). Module level, so Grain worker
processes can unpickle the transforms.

Run as a script, the trainer builds a loader with 2 workers over a dataset, takes 3
batches, prints "READY <pid>" and sleeps until it is killed:

    python -m tests.support.fault_helpers DATASET
"""

from __future__ import annotations

import os
import sys
import time


def returns_none(batch: dict) -> None:
    """A transform that forgot its `return`."""
    batch["extra"] = batch["index"]


def drops_rows(batch: dict) -> dict:
    return {k: v[:1] for k, v in batch.items()}


def returns_a_list(batch: dict) -> dict:
    return {**batch, "index": batch["index"].tolist()}


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
