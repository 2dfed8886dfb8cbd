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
from jaxload.errors import DecodeTimeoutError


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


# A decode takes at least this many rows of a device: each decode creates its decoder
# (~1.7 ms of CPU at 96x128; an NVDEC decoder comes from torchcodec's cache).
MIN_ROWS_PER_DECODE = 4
# A device decode's deadline is at least this many times the slowest seen so far.
SLOWEST_DECODE_FACTOR = 4


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
        cameras: Mapping[str, EncodedFrames],
        sample_shapes: Mapping[str, tuple[int, ...]],
        sharding_for: Callable[[int], Any],
        rows: np.ndarray,
        global_batch_size: int,
    ) -> dict[str, Any]:
        """Global jax.Arrays (G, *sample_shape) per camera: each device decodes the rows of
        `cameras` (compressed, this process's rows in batch order) it holds. `rows` are the
        global rows this process read (sorted); `sharding_for(ndim)` is the batch sharding
        for arrays of that rank."""
        import jax

        keys = list(cameras)
        shapes = {k: (global_batch_size, *sample_shapes[k]) for k in keys}
        shardings = {k: sharding_for(len(shapes[k])) for k in keys}
        placement = shardings[keys[0]].addressable_devices_indices_map(shapes[keys[0]])
        self._ensure_threads(len(placement))
        started = time.monotonic()
        pending = []  # (device, its decodes)
        for device, index in placement.items():
            local = np.searchsorted(rows, np.arange(global_batch_size)[index[0]])
            chunks = max(1, min(self.threads_per_device, len(local) // MIN_ROWS_PER_DECODE))
            target = torch_device_for(device)
            decodes = [
                self._submit(functools.partial(_decode_rows, cameras, keys, part, target))
                for part in np.array_split(local, chunks)
                if len(part)
            ]
            pending.append((device, decodes))
        per_device: dict[str, list[Any]] = {k: [] for k in keys}
        for device, decodes in pending:
            parts = [self._result(f, started, device, keys) for f in decodes]
            for key in keys:
                frames = _joined([p[key].reshape(-1, *sample_shapes[key]) for p in parts])
                per_device[key].append(jax.device_put(to_jax(frames), device))
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


def _joined(chunks: list[Any]) -> Any:
    """A device's decoded chunks (in row order) as one contiguous tensor."""
    import torch

    return (chunks[0] if len(chunks) == 1 else torch.cat(chunks)).contiguous()


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
