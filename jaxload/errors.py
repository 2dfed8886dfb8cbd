"""Errors jaxload raises for bad input. Each message names the file, episode or key at fault."""


class JaxloadError(Exception):
    """Base class: a problem with user input that jaxload detected and explained."""


class SourceError(JaxloadError):
    """A LeRobot source dataset is missing, malformed or unsupported."""


class DatasetError(JaxloadError):
    """A converted jaxload dataset is missing, malformed, or from another format version."""


class WindowError(JaxloadError, ValueError):
    """`delta_timestamps` names an unknown key or holds offsets that are not frame multiples."""


class CheckpointError(JaxloadError):
    """A loader state cannot be restored onto this loader (other dataset, batch size, version)."""


class DatasetChangedError(DatasetError):
    """The dataset on disk is no longer the version a reader opened (replaced or rewritten):
    reading on would mix two versions' data."""


class CorruptRecordError(DatasetError):
    """A record's bytes do not match the checksum written at conversion."""


class BatchTransformError(JaxloadError, TypeError):
    """A `batch_transform` returned something other than a batch: a dict of arrays whose
    first axis is this host's rows."""


class WorkerTimeoutError(JaxloadError):
    """A reader (a worker process, or the read threads of the training process) delivered
    no batch within `PipelineOptions.worker_timeout_s`: stopped, or stuck on storage."""


class UnguardedScriptError(JaxloadError, RuntimeError):
    """A script starts loader worker processes from its top level, outside
    `if __name__ == "__main__":`; each worker would run that top level again."""
