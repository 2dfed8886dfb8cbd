"""A trainer whose `batch_transform` never returns from its third call, for
tests/workers/test_read_threads.py: the process must exit all the same.

    python -m tests.support.stuck_reader timeout   # next() until WorkerTimeoutError, close()
    python -m tests.support.stuck_reader close     # two batches, close() while the read is stuck
    python -m tests.support.stuck_reader exit DATASET  # no stuck read: a batch of video,
                                                       # close() while reads run ahead

Prints "CLOSED" after close() and returns.
"""

from __future__ import annotations

import sys
import time

from jaxload import PipelineOptions, make_loader
from jaxload.errors import WorkerTimeoutError
from tests.support.fake_dataset import FakeDataset
from tests.support.fault_helpers import StuckOn


def read_ahead_then_exit(path: str) -> None:
    """Reads decoding video run ahead when the loader closes and the interpreter ends."""
    loader = make_loader(
        path,
        global_batch_size=4,
        host_index=0,
        host_count=1,
        options=PipelineOptions(num_workers=0, read_threads=2),
        delta_timestamps={"observation.image": [-0.1, 0.0]},
    )
    next(loader)
    loader.close()
    print("CLOSED", flush=True)


def main(mode: str) -> None:
    timeout_s = 2 if mode == "timeout" else 600
    loader = make_loader(
        FakeDataset([9, 14, 7]),
        global_batch_size=4,
        host_index=0,
        host_count=1,
        options=PipelineOptions(num_workers=0, read_threads=1, worker_timeout_s=timeout_s),
        batch_transform=StuckOn(3),
    )
    next(loader)
    next(loader)
    if mode == "timeout":
        try:
            next(loader)
        except WorkerTimeoutError:
            print("TIMEOUT", flush=True)
    else:
        time.sleep(0.5)  # the third read has started, and is stuck
    began = time.monotonic()
    loader.close()
    print(f"CLOSED in {time.monotonic() - began:.1f} s", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "exit":
        read_ahead_then_exit(sys.argv[2])
    else:
        main(sys.argv[1])
