"""Video decoded in the training process, onto the device that holds each batch row.

With ``make_loader(..., decode_device="cuda")`` the Grain workers only read: each camera
of a batch travels as one ``EncodedFrames`` (compressed GOPs plus frame offsets, rows in
batch order). Here, in the training process, every addressable device decodes exactly the
rows its shard of the global arrays holds (torchcodec on that device, NVDEC on a GPU;
cameras of one codec and size share a decoder), several decodes in flight per device and
all devices at once (`DeviceDecoder`), and hands them to JAX through DLPack without a
host copy.

    decoder = DeviceDecoder(threads_per_device=7, timeout_s=300)
    arrays = decoder.decode_to_global({"top": video}, {"top": (96, 128, 3)}, sharding_for, rows, 64)
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import queue
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.decode.frames import EncodedFrames, decode_grouped
from jaxload.errors import WorkerTimeoutError


def merge_encoded(parts: Sequence[tuple[np.ndarray, EncodedFrames]], n: int) -> EncodedFrames:
    """One camera's frames for n batch rows from per-dataset parts (rows, frames of those rows)."""
    if len(parts) == 1 and np.array_equal(parts[0][0], np.arange(n)):
        return parts[0][1]
    videos = [video for _, video in parts]
    merged = EncodedFrames.concat(videos)  # one init serves the camera: GOPs carry their SPS
    slots = videos[0].gop_index.shape[1:]  # the same window in every part
    merged = dataclasses.replace(
        merged,
        gop_index=merged.gop_index.reshape(-1, *slots),
        frame_index=merged.frame_index.reshape(-1, *slots),
    )
    order = np.empty(n, np.int64)  # batch row -> row of the concatenation
    order[np.concatenate([rows for rows, _ in parts])] = np.arange(n)
    return merged.select(order)


@dataclasses.dataclass
class CameraRows:
    """One camera of a batch as it reaches the training process: `encoded`, the frames of
    the rows `device_rows` (host batch rows, in the order `encoded` holds them) still
    compressed, for the devices; `host`, the camera's (n, ...) array whose other rows the
    readers decoded (hybrid), or None when the devices decode every row."""

    encoded: EncodedFrames
    device_rows: np.ndarray
    host: np.ndarray | None = None


# A decode takes at least this many rows of a device: each decode creates its decoder
# (~1.7 ms of CPU at 96x128; an NVDEC decoder comes from torchcodec's cache).
MIN_ROWS_PER_DECODE = 4
# A device decode's deadline is at least this many times the slowest seen so far.
SLOWEST_DECODE_FACTOR = 4


class DecodeTimeoutError(WorkerTimeoutError):
    """A decode on a device (torchcodec, NVDEC) did not finish within its deadline."""


class DeviceDecoder:
    """Decodes a batch's encoded cameras onto the devices that hold their rows, with
    `threads_per_device` decodes in flight on every device at once: an H100/H200 has 7
    NVDEC engines and one decoder keeps one busy, so one decode after another leaves six
    idle. Each decode is one thread's, with its own decoder (torchcodec's are not
    thread-safe); a device's rows are cut into one contiguous chunk per thread (at least
    MIN_ROWS_PER_DECODE rows each), and the chunks' frames joined on the device.

    A decode that does not finish within `timeout_s` (or SLOWEST_DECODE_FACTOR times the
    slowest so far, if longer) raises DecodeTimeoutError naming the device and cameras:
    the loader drops the pipeline and starts another (the threads are daemons: one stuck
    in a driver never holds up the process's exit).

        decoder = DeviceDecoder(threads_per_device=7, timeout_s=300)
        arrays = decoder.decode_to_global(videos, shapes, sharding_for, rows, 64)
        decoder.close()
    """

    def __init__(self, threads_per_device: int, timeout_s: float):
        self.threads_per_device = max(1, int(threads_per_device))
        self.timeout_s = float(timeout_s)
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._slowest = 0.0
        # Dropped without close() (a pipeline let go): its threads end all the same.
        self._finalizer = weakref.finalize(self, _stop, self._tasks, self._threads)

    def _ensure_threads(self, devices: int) -> None:
        wanted = self.threads_per_device * devices
        while len(self._threads) < wanted:
            thread = threading.Thread(
                target=_serve, args=(self._tasks,), daemon=True, name="jaxload-decode"
            )
            thread.start()
            self._threads.append(thread)

    def _submit(self, fn: Callable[[], Any]) -> cf.Future:
        future: cf.Future = cf.Future()
        self._tasks.put((future, fn))
        return future

    def close(self, wait_s: float = 10.0) -> None:
        """Ends the threads once their decode does, waiting up to `wait_s` for them (a
        stuck one stays, a daemon). Waiting matters at exit: a thread still holding its
        decoders while the interpreter finalizes aborts the process ("terminate called
        without an active exception")."""
        threads = list(self._threads)
        self._finalizer()
        deadline = time.monotonic() + wait_s
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    def decode_to_global(
        self,
        cameras: Mapping[str, CameraRows],
        sample_shapes: Mapping[str, tuple[int, ...]],
        sharding_for: Callable[[int], Any],
        rows: np.ndarray,
        global_batch_size: int,
    ) -> dict[str, Any]:
        """Global jax.Arrays (G, *sample_shape) per camera: each device decodes the rows of
        `cameras` it holds that are still compressed; rows the readers decoded (hybrid)
        come from the host. `rows` are the global rows this process read (sorted), in
        batch order; `sharding_for(ndim)` is the batch sharding for arrays of that rank.
        Every camera's compressed rows must be the same rows (one split per batch)."""
        import jax

        keys = list(cameras)
        on_device = cameras[keys[0]].device_rows
        if any(not np.array_equal(cameras[k].device_rows, on_device) for k in keys):
            raise ValueError("every camera decoded on the devices needs the same rows")
        videos = {k: cameras[k].encoded for k in keys}
        shapes = {k: (global_batch_size, *sample_shapes[k]) for k in keys}
        shardings = {k: sharding_for(len(shapes[k])) for k in keys}
        placement = shardings[keys[0]].addressable_devices_indices_map(shapes[keys[0]])
        self._ensure_threads(len(placement))
        started = time.monotonic()
        pending = []  # (device, its rows, its rows' places in the compressed part, decodes)
        for device, index in placement.items():
            local = np.searchsorted(rows, np.arange(global_batch_size)[index[0]])
            place = _places(on_device, local)  # -1: decoded by the readers
            mine = place[place >= 0]
            chunks = max(1, min(self.threads_per_device, len(mine) // MIN_ROWS_PER_DECODE))
            target = torch_device_for(device)
            decodes = [
                self._submit(functools.partial(_decode_rows, videos, keys, part, target))
                for part in np.array_split(mine, chunks)
                if len(part)
            ]
            pending.append((device, local, place, decodes))
        per_device: dict[str, list[Any]] = {k: [] for k in keys}
        for device, local, place, decodes in pending:
            parts = [self._result(f, started, device, keys) for f in decodes]
            target = torch_device_for(device)
            for key in keys:
                shape = sample_shapes[key]
                decoded = [p[key].reshape(-1, *shape) for p in parts]
                frames = _in_row_order(cameras[key].host, local, place, decoded, target)
                per_device[key].append(jax.device_put(to_jax(frames.reshape(-1, *shape)), device))
        self._slowest = max(self._slowest, time.monotonic() - started)
        return {
            k: jax.make_array_from_single_device_arrays(shapes[k], shardings[k], per_device[k])
            for k in keys
        }

    def _result(self, future: cf.Future, started: float, device: Any, keys: list[str]) -> Any:
        deadline = max(self.timeout_s, SLOWEST_DECODE_FACTOR * self._slowest)
        left = deadline - (time.monotonic() - started)
        try:
            return future.result(timeout=max(left, 0.0))
        except cf.TimeoutError:
            slowest = f"{self._slowest:.3g} s" if self._slowest else "none finished yet"
            raise DecodeTimeoutError(
                f"decoding cameras {keys} on {device} did not finish within {deadline:.3g} s "
                f"(worker_timeout_s={self.timeout_s:g}; slowest batch decode so far: "
                f"{slowest}): the decoder is stuck (torchcodec, the GPU driver). The loader "
                "stopped its readers; next() restarts them at the same position"
            ) from None


def _serve(tasks: queue.SimpleQueue) -> None:
    """A decode thread: runs tasks until it takes None."""
    while (task := tasks.get()) is not None:
        future, fn = task
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as e:  # raised where the batch waits for it
                future.set_exception(e)


def _stop(tasks: queue.SimpleQueue, threads: list[threading.Thread]) -> None:
    for _ in threads:
        tasks.put(None)
    threads.clear()


def _decode_rows(
    videos: Mapping[str, EncodedFrames], keys: list[str], local: np.ndarray, device: str
) -> dict[str, Any]:
    """The frames of batch rows `local` of every camera, decoded on `device` (a thread's
    own decoders: one per codec and size)."""
    decoded = decode_grouped([videos[k].select(local) for k in keys], device, as_torch=True)
    return dict(zip(keys, decoded, strict=True))


def _places(compressed_rows: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Where each of `local` (host batch rows) is among `compressed_rows`; -1 where not."""
    position = {int(r): i for i, r in enumerate(compressed_rows)}
    return np.array([position.get(int(r), -1) for r in local], np.int64)


def _in_row_order(
    host: np.ndarray | None, local: np.ndarray, place: np.ndarray, decoded: list[Any], device: str
) -> Any:
    """One contiguous tensor on `device` of a device's rows `local`, in that order: the
    rows decoded there (`decoded`, the chunks in row order) and the readers' (`host`)."""
    import torch

    from_host = place < 0
    parts = []
    if from_host.any():
        rows = torch.from_numpy(np.ascontiguousarray(host[local[from_host]]))
        parts.append(rows.to(device) if device != "cpu" else rows)
    parts += decoded
    frames = parts[0] if len(parts) == 1 else torch.cat(parts)
    if from_host.any() and not from_host.all():  # host rows first: put each row in place
        order = np.argsort(np.concatenate([local[from_host], local[~from_host]]), kind="stable")
        frames = frames[torch.from_numpy(order).to(frames.device)]
    return frames.contiguous()


def to_jax(frames: Any) -> Any:
    """A torch tensor (CPU or CUDA) as a jax.Array on the same device, sharing its memory.

    The tensor must be contiguous (EncodedFrames.decode returns contiguous frames); a
    strided view would make JAX copy or refuse.
    """
    import jax

    if not frames.is_contiguous():
        raise ValueError("to_jax needs a contiguous tensor (DLPack with compact strides)")
    return jax.dlpack.from_dlpack(frames)


def torch_device_for(jax_device: Any) -> str:
    """The torch device string of a JAX device ("cpu", or "cuda:<local id>")."""
    if jax_device.platform == "cpu":
        return "cpu"
    if jax_device.platform == "gpu":
        return f"cuda:{jax_device.local_hardware_id}"
    raise ValueError(f"cannot decode video on a {jax_device.platform} device")
