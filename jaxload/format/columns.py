"""Named numpy columns in one buffer, which worker processes map instead of unpickling.

A dataset's per-episode tables (`jaxload.format.episodes`) are numpy columns. Grain
pickles the dataset into every worker process; `Columns` pickle as the name of a
shared-memory file holding their buffer (written the first time they are pickled), so
every process of the host maps the same pages instead of holding a copy:

    columns = Columns({"length": lengths, "shard": shards})
    columns["length"]                               # a read-only view
    pickle.loads(pickle.dumps(columns))["length"]   # maps /dev/shm/jaxload_<pid>_<hex>

The file is named like the loader's batch slots (`jaxload_<pid>_<hex>`), so what a killed
process leaves behind is reclaimed the same way (`jaxload.workers.processes`). The process
that wrote it removes it when its columns are garbage-collected, or at exit; processes that
mapped it keep their mapping. Unpickling columns whose file is gone (pickled bytes kept
longer than the process that made them) raises `ColumnsGone`: the caller rebuilds them
(`jaxload.format.episodes.Episodes` reads its table again). Where there is no /dev/shm,
columns pickle by value. The process that wrote the file keeps its own copy (a file of
/dev/shm can be written by any process of the user) and checks the file each time it
pickles the columns again, writing a new one when it changed.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from xxhash import xxh3_64_intdigest

from jaxload.errors import SharedMemoryError

SHM_DIR = "/dev/shm"  # POSIX shared memory on Linux (jaxload.workers.shared_batch's too)
ALIGN = 64  # each column starts on a cache line


class ColumnsGone(Exception):
    """The shared-memory file of unpickled columns no longer exists."""


class Columns(Mapping[str, np.ndarray]):
    """Read-only numpy arrays by name, stored in one buffer; picklable by reference to a
    shared-memory file (module docstring).

    Args:
        arrays: name -> array (copied into the buffer, C order).

    Example:
        >>> columns = Columns({"length": np.array([5, 1, 2])})
        >>> int(columns["length"].sum()), columns.nbytes
        (8, 64)
    """

    def __init__(self, arrays: Mapping[str, np.ndarray]):
        layout, size = {}, 0
        for name, array in arrays.items():
            array = np.asarray(array)
            layout[name] = (size, array.dtype.str, array.shape)
            size += -(-array.nbytes // ALIGN) * ALIGN
        raw = np.zeros(max(size, 1) + ALIGN, np.uint8)
        skip = -raw.ctypes.data % ALIGN
        buffer = raw[skip : skip + max(size, 1)]  # aligned as a shared mapping (a page) is
        for name, array in arrays.items():
            offset, dtype, shape = layout[name]
            _view(buffer, offset, dtype, shape, writeable=True)[...] = array
        self._set(buffer, layout, size)
        self._ref: tuple | None = None  # (name, size, xxh3, layout) once shared
        self._wrote = False  # whether this process wrote the file `_ref` names
        self._lock = threading.Lock()

    def _set(self, buffer: Any, layout: dict, size: int) -> None:
        self._layout, self._size = layout, size
        self._arrays = {name: _view(buffer, *where) for name, where in layout.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self._arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer (columns padded to ALIGN)."""
        return self._size

    @property
    def shared_name(self) -> str | None:
        """The shared-memory file these columns map or were written to; None before."""
        return self._ref[0] if self._ref else None

    def __reduce__(self) -> tuple:
        ref = self._share()
        if ref is None:  # no shared memory here: by value
            return (Columns, ({n: np.array(a) for n, a in self._arrays.items()},))
        return (_attach, (ref,))

    def _share(self) -> tuple | None:
        """Writes the buffer to a new shared-memory file (once; again when the file was
        changed or removed since: what workers map must be what this process holds) and
        returns its reference. This process keeps its own copy: a file in /dev/shm can be
        written by any process of the user, and must not change what it reads."""
        with self._lock:
            if not os.path.isdir(SHM_DIR):
                return self._ref
            if self._ref is not None:
                if not self._wrote or _intact(self._ref):
                    return self._ref
                _unlink(os.path.join(SHM_DIR, self._ref[0]))  # changed: workers get a new one
                self._ref = None
            name = f"jaxload_{os.getpid()}_{secrets.token_hex(8)}"
            path = os.path.join(SHM_DIR, name)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, max(self._size, 1))
                mapping = mmap.mmap(fd, max(self._size, 1))
            except BaseException:
                os.unlink(path)
                raise
            finally:
                os.close(fd)
            weakref.finalize(self, _unlink, path)
            target = np.frombuffer(mapping, np.uint8)
            for name_, (offset, dtype, shape) in self._layout.items():
                _view(target, offset, dtype, shape, writeable=True)[...] = self._arrays[name_]
            digest = xxh3_64_intdigest(mapping)
            del target
            mapping.close()
            self._ref, self._wrote = (name, self._size, digest, self._layout), True
            return self._ref


def _attach(ref: tuple) -> Columns:
    """Columns over the shared-memory file `ref` names (unpickling); ColumnsGone when it is
    missing, SharedMemoryError when it is not what was written."""
    name, size, digest, layout = ref
    path = os.path.join(SHM_DIR, name)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise ColumnsGone(f"{path}: shared columns gone (their process dropped them)") from None
    try:
        if os.fstat(fd).st_size != max(size, 1):
            raise SharedMemoryError(
                f"{path}: the shared copy of a dataset's metadata tables has "
                f"{os.fstat(fd).st_size} bytes, {max(size, 1)} were written (changed by "
                "another process); the next next() of the loader starts again on a fresh copy"
            )
        mapping = mmap.mmap(fd, max(size, 1), prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    if xxh3_64_intdigest(mapping) != digest:
        raise SharedMemoryError(
            f"{path}: the shared copy of a dataset's metadata tables changed after it was "
            "written (another process of this user wrote to /dev/shm); its readers refuse it. "
            "The next next() of the loader starts its workers again on a fresh copy"
        )
    columns = Columns.__new__(Columns)
    columns._set(np.frombuffer(mapping, np.uint8), layout, size)
    columns._ref, columns._wrote, columns._lock = ref, False, threading.Lock()
    return columns


def _intact(ref: tuple) -> bool:
    """Whether the shared-memory file `ref` names still holds what was written."""
    name, size, digest, _ = ref
    try:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDONLY)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size != max(size, 1):
            return False
        with mmap.mmap(fd, max(size, 1), prot=mmap.PROT_READ) as mapping:
            return xxh3_64_intdigest(mapping) == digest
    finally:
        os.close(fd)


def _view(buffer: np.ndarray, offset: int, dtype: str, shape: tuple, writeable: bool = False):
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        array = np.empty(shape, np.dtype(dtype))
    else:
        array = np.frombuffer(buffer, np.dtype(dtype), count, offset).reshape(shape)
    if not writeable:
        array.flags.writeable = False
    return array


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
