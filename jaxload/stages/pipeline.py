"""The Grain stages around the per-batch read (jaxload.stages.read_batch), and the
pipeline they make (`build_pipeline`)::

    MapDataset.range(batches left)            batch number k, relative to the restored position
      .map(ReadBatch)                         positions -> samples + video decoded into one dict
      .to_iter_dataset(ReadOptions)           read threads in each worker
    SharedMemoryOutput                        workers build camera arrays in reused shared memory
      .mp_prefetch(MultiprocessingOptions)    worker processes, deterministic round robin;
                                              each exits when the training process dies
    WatchReaders                              a reader silent past worker_timeout_s: an error
      .map(OpenSlots)                         zero-copy views of those arrays
      .map(ToGlobalArrays)                    numpy -> global jax.Array (only with `sharding`);
                                              decode_device="cuda": each device decodes its rows;
                                              image transforms on the devices run here
      ThreadPrefetchIterDataset               background thread: the trainer never waits on Python
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import grain
import numpy as np

from jaxload.batch import hosts
from jaxload.batch.keys import is_host_only
from jaxload.decode import nvdec
from jaxload.decode.frames import EncodedFrames
from jaxload.decode.on_device import CameraRows, DeviceDecoder
from jaxload.errors import WorkerTimeoutError
from jaxload.placement.split import DecodeSplit, SplitBalance
from jaxload.resolution.spec import LoaderSpec
from jaxload.stages.read_batch import DEVICE_SHARE_KEY, Batch, ReadBatch, unpacked_gops
from jaxload.transforms.on_device import POSITIONS_KEY, TransformOnDevices
from jaxload.workers import shared_batch
from jaxload.workers.processes import WorkerRegistry

# Arrays smaller than this go from workers to the trainer pickled, larger ones through
# shared memory (camera arrays are built there directly, whatever their size).
MIN_SHM_BYTES = 1 << 16
# A reader's deadline is at least this many times the slowest batch seen after start-up,
# so a pipeline that is merely slow (large batches, slow storage) is never called stuck.
SLOWEST_BATCH_FACTOR = 4
# ... and at least this long for a reader's first batch, which includes starting the worker
# process (importing jax and torch: ~5 s of CPU here, more on a busy machine).
STARTUP_GRACE_S = 60.0


class SharedMemoryOutput(grain.IterDataset):
    """Passes its parent through; tells ReadBatch to build batches in shared memory.

    Grain calls `enable_shared_memory_output` on the dataset given to `mp_prefetch` in the
    workers; ReadBatch then builds camera arrays in shared-memory slots and sends their
    references (`jaxload.workers.shared_batch`), which `OpenSlots` opens in the training process.
    """

    def __init__(self, parent: grain.IterDataset, read_batch: ReadBatch):
        super().__init__(parent)
        self.upstream, self.read_batch = parent, read_batch

    def __iter__(self) -> grain.DatasetIterator:
        return self.upstream.__iter__()

    def enable_shared_memory_output(self) -> None:
        self.read_batch.output_to_shared_memory = True


class OpenSlots(grain.transforms.Map):
    """Batches from the workers as plain ndarrays, without copies: camera arrays from their
    shared-memory slots (`jaxload.workers.shared_batch`), other large arrays from Grain's
    shared memory (Grain unlinks those once the last view is gone)."""

    def __init__(self) -> None:
        self.opener = shared_batch.SlotOpener()

    def map(self, batch: Batch) -> Batch:
        out = {}
        for key, value in batch.items():
            if isinstance(value, shared_batch.SlotRef):
                value = self.opener.open(value)
            elif isinstance(value, np.ndarray):
                value = value.view(np.ndarray)
            else:  # compressed frames for the devices: GOPs in a slot
                value = unpacked_gops(value, self.opener)
            out[key] = value
        return out


class ToGlobalArrays(grain.transforms.Map):
    """Host-local batch -> global jax.Arrays over the spec's sharding (strings stay numpy).

    Cameras the readers left compressed (decode_device "cuda" or "device": every row;
    "hybrid": the devices' share of the rows, `DeviceShare`) are decoded here, each device
    decoding the rows it holds, several decodes in flight per device
    (`jaxload.decode.on_device.DeviceDecoder`). With a hybrid `split`, the time each batch
    took to decode here and the prefetch thread's wait for the readers move the split
    (`jaxload.placement.split.SplitBalance`). Image transforms placed on the devices
    run here, after decode (jaxload.transforms.on_device).
    """

    def __init__(self, spec: LoaderSpec, split: DecodeSplit | None = None):
        self.sharding, self.global_batch_size = spec.sharding, spec.global_batch_size
        self.rows = spec.rows
        self.sample_shapes = {k: spec.schema.fields[k].shape for k in spec.placement.encoded}
        self._by_rank: dict[int, Any] = {}
        self.decoder = None
        if spec.placement.encoded:
            threads = spec.placement.decode_threads
            self.decoder = DeviceDecoder(threads, spec.options.worker_timeout_s)
            if spec.placement.streams and _on_gpus(spec.sharding):
                nvdec.configure_cache(threads, spec.placement.streams)
        self.balance = SplitBalance(split) if split is not None else None
        self.on_devices = None
        on_devices = spec.placement.transforms_on_devices
        if on_devices is not None:
            self.on_devices = TransformOnDevices(
                on_devices, spec.seed, self._sharding, self.to_global
            )

    def _sharding(self, ndim: int) -> Any:
        if ndim not in self._by_rank:
            self._by_rank[ndim] = hosts.sharding_for_rank(self.sharding, ndim)
        return self._by_rank[ndim]

    def to_global(self, value: np.ndarray) -> Any:
        """This host's rows of one key -> the global jax.Array over the batch sharding."""
        import jax

        global_shape = (self.global_batch_size, *value.shape[1:])
        return jax.make_array_from_process_local_data(
            self._sharding(value.ndim), value, global_shape
        )

    def map(self, batch: Batch) -> Batch:
        batch = dict(batch)
        positions = batch.pop(POSITIONS_KEY, None)
        share = batch.pop(DEVICE_SHARE_KEY, None)
        n = len(self.rows)
        cameras = {
            k: CameraRows(v, np.arange(n)) for k, v in batch.items() if isinstance(v, EncodedFrames)
        }
        if share is not None and len(share.rows):  # hybrid, some rows for the devices
            cameras |= {k: CameraRows(v, share.rows, batch[k]) for k, v in share.encoded.items()}
        out = {}
        began = time.monotonic()
        if cameras:
            shapes = {k: self.sample_shapes[k] for k in cameras}
            out = self.decoder.decode_to_global(
                cameras, shapes, self._sharding, self.rows, self.global_batch_size
            )
        if self.balance is not None and share is not None:
            self.balance.devices_decoded(time.monotonic() - began, share.share)
        for key, value in batch.items():
            if key in cameras:
                continue
            if is_host_only(value):  # strings a caller asked for with `keys`
                out[key] = value
            else:
                out[key] = self.to_global(value)
        if self.on_devices is not None:
            out = self.on_devices(out, positions)
        return {k: out[k] for k in batch}

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.close()


def _on_gpus(sharding: Any) -> bool:
    return all(d.platform == "gpu" for d in sharding.addressable_devices)


class WatchReaders(grain.IterDataset):
    """Passes batches through; raises WorkerTimeoutError when the reader that owes the next
    batch delivers none within the deadline (a stopped worker, or one stuck on storage).

    Batch n comes from worker n % num_workers (mp_prefetch's round robin), so the error
    names the worker, its pid (`workers`, the pipeline's WorkerRegistry) and what batch n
    reads (`describe(n)`). The first batch asked for starts every worker at once (Grain's
    `start_prefetch`; otherwise each starts when the round robin first reaches it). The
    deadline is `timeout_s`, or SLOWEST_BATCH_FACTOR times the slowest batch seen after
    every reader's first, whichever is longer; a reader's first batch, which includes
    starting the worker, gets at least STARTUP_GRACE_S.
    """

    def __init__(
        self,
        parent: grain.IterDataset,
        timeout_s: float,
        describe: Callable[[int], str],
        workers: WorkerRegistry | None,
        num_workers: int,
        balance: SplitBalance | None = None,
    ):
        super().__init__(parent)
        self.upstream = parent
        self.timeout_s, self.describe = timeout_s, describe
        self.workers, self.num_workers = workers, num_workers
        self.balance = balance  # hybrid decoding: told how long each batch was waited for

    def __iter__(self) -> grain.DatasetIterator:
        return _WatchedIterator(self.upstream.__iter__(), self)


class _WatchedIterator(grain.DatasetIterator):
    """The parent's next() runs in a helper thread, so the wait for it can time out."""

    def __init__(self, parent: grain.DatasetIterator, watch: WatchReaders):
        super().__init__(parent)
        self._upstream = parent
        self._watch = watch
        self._count: int | None = 0  # batches delivered: the next one is batch `_count`
        self._slowest = 0.0
        self._stuck: WorkerTimeoutError | None = None
        self._requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
        self._helper: threading.Thread | None = None

    def __next__(self) -> Any:
        if self._stuck is not None:
            raise self._stuck
        if self._helper is None:
            self._upstream.start_prefetch()  # every worker process at once
            # A daemon thread: one stuck on a stopped worker must not hold up interpreter exit.
            self._helper = threading.Thread(target=self._serve, daemon=True, name="jaxload-watch")
            self._helper.start()
        started = time.monotonic()
        self._requests.put(True)
        deadline = max(self._watch.timeout_s, SLOWEST_BATCH_FACTOR * self._slowest)
        if self._starting:
            deadline = max(deadline, STARTUP_GRACE_S)
        try:
            element, error = self._results.get(timeout=min(deadline, threading.TIMEOUT_MAX))
        except queue.Empty:
            self._stuck = self._timeout_error(time.monotonic() - started)
            raise self._stuck from None
        if error is not None:
            raise error
        if self._watch.balance is not None:
            self._watch.balance.readers_waited(time.monotonic() - started)
        if not self._starting:
            self._slowest = max(self._slowest, time.monotonic() - started)
        if self._count is not None:
            self._count += 1
        return element

    @property
    def _starting(self) -> bool:
        """Whether the next batch is some reader's first."""
        return self._count is not None and self._count < max(1, self._watch.num_workers)

    def _serve(self) -> None:
        while self._requests.get():
            try:
                self._results.put((self._upstream.__next__(), None))
            except BaseException as e:  # handed to __next__, raised there
                self._results.put((None, e))

    def _timeout_error(self, waited: float) -> WorkerTimeoutError:
        n, count = self._count, self._watch.num_workers
        pid, reader = None, "the read threads of this process"
        if count and n is not None and self._watch.workers is not None:
            pid = self._watch.workers.pid(n % count)
            reader = f"worker {n % count} of {count} (pid {pid})"
        elif count:
            reader = f"one of the {count} worker processes"
        batch = "its batch" if n is None else f"batch {n} ({self._watch.describe(n)})"
        slowest = f"{self._slowest:.3g} s" if self._slowest else "none measured yet"
        error = WorkerTimeoutError(
            f"{reader} delivered no batch for {waited:.0f} s (worker_timeout_s="
            f"{self._watch.timeout_s:g}; slowest batch so far: {slowest}): it is stopped, or "
            f"stuck reading {batch}. The loader stopped its readers; next() restarts them "
            "at the same position."
        )
        error.pid = pid
        return error

    def get_state(self) -> dict[str, Any]:
        return self._upstream.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._upstream.set_state(state)
        self._count = None  # Grain's own state: which batch comes next is no longer known

    def close(self) -> None:
        self._requests.put(False)
        super().close()


def build_pipeline(
    read_batch: ReadBatch,
    count: int | None,
    to_global: ToGlobalArrays | None,
    workers: WorkerRegistry | None,
) -> grain.IterDataset:
    """The Grain pipeline of `count` batches (None: forever) read by `read_batch`, run as
    its spec's options say; `workers` (with worker processes) learns who they are."""
    options = read_batch.spec.options
    ds = grain.MapDataset.range(sys.maxsize if count is None else count).map(read_batch)
    it = ds.to_iter_dataset(
        grain.ReadOptions(
            num_threads=options.read_threads,
            prefetch_buffer_size=max(1, 2 * options.read_threads),
        )
    )
    if options.num_workers > 0:
        if workers is None:
            raise ValueError("worker processes need a WorkerRegistry")
        # Small arrays travel pickled: a shared-memory segment per array (Grain's
        # default) costs more syscalls than copying a few KB.
        it = grain.experimental.WithOptionsIterDataset(
            it, grain.experimental.DatasetOptions(min_shm_size=MIN_SHM_BYTES)
        )
        it = SharedMemoryOutput(it, read_batch).mp_prefetch(
            grain.MultiprocessingOptions(
                num_workers=options.num_workers,
                per_worker_buffer_size=options.worker_buffer_size,
            ),
            worker_init_fn=workers.hooks(),
        )
    balance = to_global.balance if to_global is not None else None
    it = WatchReaders(
        it, options.worker_timeout_s, read_batch.describe, workers, options.num_workers, balance
    )
    if options.num_workers > 0:
        it = it.map(OpenSlots())
    if to_global is not None:
        it = it.map(to_global)
    return grain.experimental.ThreadPrefetchIterDataset(it, prefetch_buffer_size=options.prefetch)
