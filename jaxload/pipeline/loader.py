"""The `Loader`: iterates the global batches a `LoaderSpec` defines, with exact, elastic
state. `make_loader` (jaxload.pipeline.make_loader) resolves the spec.

Batch k is global positions ``[k*G, (k+1)*G)`` of the sample stream (see
``jaxload.sampling.stream``); a batch's content depends on neither worker nor host count,
so the loader's state is the global position of the next batch (see ``jaxload.state``).
The Grain pipeline: ``jaxload.stages.pipeline``, one stage per module of ``jaxload.stages``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import grain

from jaxload.batch.keys import Batch, MissingKeys, register_batch_pytree
from jaxload.episode_dataset import EpisodeDataset, OpenedDatasets
from jaxload.errors import RemoteError, WorkerDiedError, WorkerTimeoutError
from jaxload.resolution.spec import LoaderSpec
from jaxload.stages.pipeline import build_pipeline
from jaxload.stages.read_batch import ReadBatch
from jaxload.stages.to_global import ToGlobalArrays
from jaxload.state import LoaderState, check_compatible
from jaxload.storage.stats_board import StatsBoard, combine
from jaxload.workers import fork_server, main_guard
from jaxload.workers import processes as workers
from jaxload.workers.read_threads import DaemonReads
from jaxload.workers.shared_batch import SHM_DIR
from jaxload.workers.shm_space import batch_bytes, check_shared_memory


class Loader:
    """Iterator of global batches with exact, elastic `get_state`/`set_state`; made by
    `make_loader` from a resolved `LoaderSpec` (what is read, and how: `loader.spec`).

    Example:
        >>> loader = jaxload.make_loader("out/demo", global_batch_size=4,
        ...                              options=jaxload.PipelineOptions(num_workers=0))
        >>> batch = next(loader)
        >>> loader.position, loader.spec.global_batch_size
        (4, 4)
        >>> loader.close()
    """

    def __init__(self, spec: LoaderSpec, datasets: OpenedDatasets):
        self.spec = spec
        self._datasets = datasets  # opened for this loader: `close` stops their fetching
        self._start = 0  # global position of the first batch of the current pipeline
        self._delivered = 0  # batches handed out since _start
        self._iterator: Any = None
        self._workers: workers.WorkerRegistry | None = None  # the running pipeline's
        self._to_global: ToGlobalArrays | None = None  # the running pipeline's
        self._reads: DaemonReads | None = None  # the running pipeline's reads (no workers)
        register_batch_pytree()
        self._missing = MissingKeys(
            spec.keys, tuple(spec.schema.strings), tuple(spec.schema.fields)
        )

    # -- what it reads and how (the spec's, for convenience) ---------------------------------

    @property
    def options(self) -> Any:
        """The resolved `jaxload.PipelineOptions` (every knob set)."""
        return self.spec.options

    @property
    def datasets(self) -> tuple[EpisodeDataset, ...]:
        """The opened datasets, one per source (`jaxload.episode_dataset.EpisodeDataset`)."""
        return self._datasets.datasets

    @property
    def stream(self) -> Any:
        return self.spec.stream

    @property
    def global_batch_size(self) -> int:
        return self.spec.global_batch_size

    def mixture_table(self) -> str:
        """The datasets as a table: episodes, frames, weight, exact share of a batch, and
        epochs of each per million samples (make_loader logs it at INFO for a mixture)."""
        from jaxload.resolution.arguments import dataset_sizes
        from jaxload.sampling.weights import weights_table

        spec = self.spec
        sizes = dataset_sizes(self.datasets, spec.drop_n_first_frames, spec.drop_n_last_frames)
        mixture = spec.stream.mixture
        weights = [1.0] if mixture is None else mixture.weights
        shares = [1.0] if mixture is None else mixture.shares
        return weights_table(
            spec.names, sizes["frames"], sizes["episodes"], sizes["anchors"], weights, shares
        )

    # -- iteration ---------------------------------------------------------------------------

    def __iter__(self) -> Loader:
        return self

    @property
    def has_video(self) -> bool:
        """Whether a dataset has video cameras (the readers may decode some)."""
        return any(d.video_cameras for d in self.datasets)

    def start(self) -> Loader:
        """Start worker processes and prefetching now (otherwise the first next() does).

        Raises jaxload.errors.UnguardedScriptError, before any worker starts, when called
        from a script's top level outside `if __name__ == "__main__":` (see
        jaxload.workers.main_guard)."""
        if self._iterator is None:
            stores = self._datasets.stores.values()
            if self.options.num_workers > 0:
                main_guard.check_before_start(self.options.num_workers)
                for store in stores:  # workers publish their counters for `stats`
                    if store.board is None:
                        store.board = StatsBoard()
                self._workers = workers.WorkerRegistry()
                fork_server.start_fork_server(self.has_video)
            workers.reclaim_shared_memory()  # what crashed loaders on this machine left
            check_shared_memory(batch_bytes(self.spec), self.options, SHM_DIR)  # before any worker
            pipeline, self._reads = self._build()
            self._iterator = pipeline.__iter__()
            self._iterator.start_prefetch()
            _RUNNING.add(self)
        return self

    def __next__(self) -> Batch:
        self.start()
        try:
            batch = next(self._iterator)
        except StopIteration:
            raise
        except (WorkerTimeoutError, RemoteError) as e:
            # A stuck reader, or storage that gave up after its retries: the pipeline holds
            # the error and would raise it again. Dropped, so that the next next() reads the
            # same position anew (an outage that has ended costs one exception, not the loader).
            self._abandon(getattr(e, "pid", None), stuck=isinstance(e, WorkerTimeoutError))
            raise
        except Exception as e:
            # Whatever failed, this pipeline lost the batch: Grain drops the reader that
            # raised (a dead worker's shard, or one that forwarded an error), and its next
            # batches would be served in this one's place. Dropped too, so that the next
            # next() reads this position anew, or raises again.
            failure = self._worker_failure(e)
            self._abandon(None)
            if failure is None:
                raise
            raise failure from e
        self._delivered += 1
        for store in self._datasets.stores.values():  # workers' reads in one line, here
            store.log_progress()
        out = Batch(batch)
        out.missing = self._missing  # a missing key's KeyError says why
        return out

    def _worker_failure(self, error: Exception) -> Exception | None:
        """The error behind a failed next() when a worker process ended under it: an
        unguarded script re-run by a worker, or a worker that died (a signal, a crash)."""
        unguarded = main_guard.explain_worker_crash()
        if unguarded is not None or self._workers is None:
            return unguarded
        dead = workers.death(self._workers, error)
        if dead is None:
            return None
        count = self.options.num_workers
        if dead.index is None:  # killed while starting: the batch due is its first
            held, worker = self._delivered, f"a worker of {count}, still starting,"
        else:
            # Worker i reads batches i, i + count, ... of the pipeline (Grain's round
            # robin): the first it owes from here on is the one it held.
            held = self._delivered + (dead.index - self._delivered) % count
            worker = f"worker {dead.index} of {count} (pid {dead.pid})"
        failure = WorkerDiedError(
            f"{worker} {dead.describe()} while reading batch {held} "
            f"({self.spec.describe(self._start, held)}). The loader "
            f"stopped its readers; next() restarts them at position {self.position}, the "
            "batch not yet served"
        )
        failure.pid, failure.signal, failure.status = dead.pid, dead.signal, dead.status
        failure.position = self._start + held * self.spec.global_batch_size
        return failure

    def _abandon(self, stuck_pid: int | None, stuck: bool = False) -> None:
        """Drops a pipeline whose reader is stuck or dead; the next next() starts a new one
        at the same position. A stuck worker is killed (a stopped one would keep Grain's
        close waiting on it), and the rest closes in the background: a reader stuck on
        storage may never return (`stuck`: nor does interpreter exit wait for it)."""
        if stuck_pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(stuck_pid, signal.SIGKILL)
        iterator, self._iterator = self._iterator, None
        registry, self._workers = self._workers, None
        parts = self._let_go(stuck)
        _RUNNING.discard(self)
        # The next pipeline never waits on the fetches of this one.
        for store in self._datasets.stores.values():
            store.restart()

        def close() -> None:
            if registry is not None:  # first: the workers stop reading (WorkerRegistry.close)
                registry.close()
            if iterator is not None:
                iterator.close()
            for part in parts:
                part.close()

        threading.Thread(target=close, daemon=True, name="jaxload-abandon").start()

    def _let_go(self, stuck: bool = False) -> list[Any]:
        """The running pipeline's decode threads, to close."""
        if self._reads is not None:  # a read stuck in a batch_transform is left behind
            self._reads.release(stuck=stuck)
        parts = [self._to_global] if self._to_global is not None else []
        self._to_global = self._reads = None
        return parts

    def close(self) -> None:
        """Stop the background thread and the worker processes (a later next() restarts them)."""
        if self._reads is not None:  # first: nothing waits on a read stuck meanwhile
            self._reads.release()
        if self._workers is not None:  # then the workers stop reading (WorkerRegistry.close)
            self._workers.close()
            self._workers = None
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None
        for part in self._let_go():
            part.close()
        self._datasets.close()  # stop fetching ahead
        _RUNNING.discard(self)

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Bound at definition: at interpreter exit the module's globals may already be None.
    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        if not _finalizing():
            self.close()

    # -- position and size -------------------------------------------------------------------

    @property
    def position(self) -> int:
        """Global sample position of the next batch."""
        return self._start + self._delivered * self.spec.global_batch_size

    @property
    def epoch(self) -> int:
        """Epoch of the next batch's first sample (mixtures: nominal epochs, see jaxload.sampling.stream)."""
        return self.position // self.spec.stream.epoch_size

    @property
    def epoch_size(self) -> int:
        """Samples per epoch: the valid anchors (the sum over datasets in a mixture)."""
        return self.spec.stream.epoch_size

    @property
    def num_batches(self) -> int | None:
        """Batches left from the current position; None when it repeats forever."""
        return self.spec.num_batches(self.position)

    @property
    def element_spec(self) -> dict[str, Any]:
        """A `jax.ShapeDtypeStruct` per array key of a batch (global shape and jax.Array
        dtypes with `sharding`; `LoaderSpec.element_spec`).

        Describes the collated batch after `image_transforms` (cameras at their output size
        and dtype), before any `batch_transform`, restricted to the keys a batch holds
        (`keys`; string keys have no spec).
        """
        return self.spec.element_spec

    def __repr__(self) -> str:
        spec = self.spec
        sources = repr(list(spec.names))
        mixture = spec.stream.mixture
        if mixture is not None:
            quota = ":".join(str(int(q)) for q in mixture.quota)
            sources += f" ({quota} per block of {mixture.block_size})"
        rows = spec.rows
        if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
            part = f"rows {rows[0]}..{rows[-1]}"
        else:
            part = f"{len(rows)} rows"
        epochs = "" if spec.num_epochs is None else f" of {spec.num_epochs}"
        return (
            f"Loader(sources={sources}, global_batch_size={spec.global_batch_size}, "
            f"seed={spec.seed}, hosts={spec.host_count} (this one: {part}), "
            f"workers={spec.options.num_workers}, read_threads={spec.options.read_threads}, "
            f"{self._decode_repr()}{self._transforms_repr()}"
            f"epoch={self.epoch}{epochs}, step={self.position // spec.global_batch_size}, "
            f"position={self.position})"
        )

    def _decode_repr(self) -> str:
        placement = self.spec.placement
        choice = placement.choice
        auto = f" (auto: {choice.describe()})" if choice is not None else ""
        if placement.decode_device == "cpu" or not placement.encoded:
            return f"decode=cpu{auto}, " if auto else ""
        return f"decode={placement.decode_device} x{placement.decode_threads}{auto}, "

    def _transforms_repr(self) -> str:
        placement = self.spec.placement
        if placement.image_transforms is None:
            return ""
        steps = ", ".join(type(t).__name__ for t in placement.image_transforms.transforms)
        return f"image_transforms=[{steps}] on {placement.image_transforms_on}, "

    # -- state -------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """The JSON-able state: restoring it makes the next batch this loader's next batch."""
        return self.spec.state_at(self.position).to_dict()

    def set_state(
        self, state: Mapping[str, Any], *, allow_global_batch_size_change: bool = False
    ) -> None:
        """Continue from a saved state; the host count may differ from the one at save.

        Raises jaxload.errors.CheckpointError for another dataset, seed or sampling setup,
        or another global batch size unless `allow_global_batch_size_change`.
        """
        saved = LoaderState.from_dict(state)
        check_compatible(
            saved,
            self.spec.state_at(saved.position),
            allow_global_batch_size_change=allow_global_batch_size_change,
        )
        self.close()
        self._start, self._delivered = saved.position, 0

    # -- the Grain pipeline ------------------------------------------------------------------

    @property
    def stats(self) -> dict[str, Any]:
        """Per remote dataset, the read counters of this process and its worker processes
        added up: requests, bytes fetched, cache hit rate, measured latency, transport
        (`jaxload.storage.remote.RemoteStore.stats`; a worker's are at most a second old).
        The loader's process also logs them (logger "jaxload.storage", level INFO, every
        `RemoteOptions.log_every_s`)."""
        out = {}
        for d, store in self._datasets.stores.items():
            published = store.board.read(store.url) if store.board is not None else []
            out[self.spec.names[d]] = combine([store.stats(), *published])
        return out

    def read_batch(self) -> ReadBatch:
        """The per-batch read transform, anchored at the current position (remote datasets:
        fetching ahead of each batch, jaxload.storage.prefetch)."""
        return ReadBatch(self.spec.for_readers(), self._datasets, self.position)

    def grain_dataset(self) -> grain.IterDataset:
        """The Grain pipeline from the current position on (what `next` iterates)."""
        return self._build()[0]

    def _build(self) -> tuple[grain.IterDataset, DaemonReads]:
        """The pipeline, and its reads (for `close` to let go of, when the loader runs it)."""
        if self.spec.sharding is not None:
            self._to_global = ToGlobalArrays(self.spec)
        read_batch = self.read_batch()
        pipeline = build_pipeline(read_batch, self.num_batches, self._to_global, self._workers)
        return pipeline, read_batch.reads


# Loaders with a live pipeline. Closed before interpreter teardown: Grain's own __del__
# would otherwise run against half-finalized modules and print tracebacks at exit.
_RUNNING: weakref.WeakSet[Loader] = weakref.WeakSet()


@atexit.register
def _close_running_loaders() -> None:
    for loader in list(_RUNNING):
        loader.close()
