"""Errors jaxload raises for bad input. Each message names the file, episode or key at fault."""


class JaxloadError(Exception):
    """Base class: a problem with user input that jaxload detected and explained."""


class SourceError(JaxloadError):
    """A LeRobot source dataset is missing, malformed or unsupported."""


class DatasetError(JaxloadError):
    """A converted jaxload dataset is missing, malformed, or from another format version."""


class RemoteError(JaxloadError):
    """A request to remote storage (s3://, gs://, hf://, https://, the Hugging Face Hub)
    failed: for good (missing, access denied, no such bucket) or after all its retries.

    A transport failure, not a judgement of the data, and the same whether the converter
    was reading a LeRobot source, uploading its output or the loader was reading a
    converted dataset; hence its own branch, neither a SourceError nor a DatasetError.
    The message names the URL. `kind` is one of `jaxload.storage.retry`'s TRANSIENT,
    MISSING, AUTH, PERMANENT, OFFLINE, UNREACHABLE.
    """

    def __init__(self, message: str, kind: str = "permanent"):
        # `kind` has a default so that the error unpickles (exceptions are rebuilt from
        # `args` alone, then `__dict__` restores `kind`): a converter worker's RemoteError
        # must reach the parent process as itself.
        super().__init__(message)
        self.kind = kind


class WindowError(JaxloadError, ValueError):
    """`delta_timestamps` names an unknown key or holds offsets that are not frame multiples."""


class CheckpointError(JaxloadError):
    """A loader state cannot be restored onto this loader (other dataset, batch size, version)."""


class DatasetChangedError(DatasetError):
    """The dataset on disk is no longer the version a reader opened (replaced or rewritten):
    reading on would mix two versions' data."""


class OpenFilesLimitError(JaxloadError):
    """The process ran out of file descriptors (`ulimit -n`), or its limit is too low for
    the configured read threads; the message says the limit and what holds the files."""


class CorruptRecordError(DatasetError):
    """A record's bytes do not match the checksum written at conversion."""


class BatchTransformError(JaxloadError, TypeError):
    """A `batch_transform` returned something other than a batch: a dict of arrays whose
    first axis is this host's rows."""


class SharedMemoryError(JaxloadError):
    """Shared memory (/dev/shm) cannot hold what the loader puts there (full, read-only,
    too small), or a file of it changed under the loader."""


class WorkerTimeoutError(JaxloadError):
    """A reader (a worker process, or the read threads of the training process) delivered
    no batch within `PipelineOptions.worker_timeout_s`: stopped, or stuck on storage."""


class DecodeTimeoutError(WorkerTimeoutError):
    """A decode on a device (torchcodec, NVDEC) did not finish within its deadline."""


class GpuDecodeUnavailable(JaxloadError, RuntimeError):
    """The installed torchcodec cannot decode on a GPU the way jaxload needs."""


class UnguardedScriptError(JaxloadError, RuntimeError):
    """A script starts loader worker processes from its top level, outside
    `if __name__ == "__main__":`; each worker would run that top level again."""


class WorkerDiedError(JaxloadError):
    """A worker process ended while the pipeline needed it (a signal such as the OOM
    killer's SIGKILL, or a crash). The loader drops that pipeline: the next next()
    starts new workers at the position of the batch not yet served.

    Attributes: `pid`, `signal` (None when it exited) and `status` (its exit status, None
    when killed) of the worker, and `position`, the global position of the batch it held."""

    pid: int | None = None
    signal: int | None = None
    status: int | None = None
    position: int | None = None
