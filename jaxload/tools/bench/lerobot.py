"""The reference users have today: `LeRobotDataset(delta_timestamps=...)` in a torch DataLoader.

Set up as openpi feeds JAX (src/openpi/training/data_loader.py): a shuffling DataLoader
with `num_workers` spawned, persistent worker processes and `drop_last=True`, over a
LeRobotDataset of the LeRobot source the jaxload dataset was converted from, with the same
`delta_timestamps` and batch size as the jaxload run. LeRobot decodes with torchcodec.

LeRobot is optional (the `bench` extra, or `bash scripts/install_lerobot.sh`); everything
here imports it lazily, so `jaxload` itself never needs it.

Example:
    >>> from jaxload.tools import bench
    >>> from jaxload.tools.bench import lerobot as bench_lerobot
    >>> windows = bench.bench_windows("out/ds")  # the jaxload dataset converted from src/
    >>> result = bench_lerobot.measure_lerobot("src/", delta_timestamps=windows, num_workers=2)
    >>> result.samples_per_s
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxload.tools.bench.measure import RssSampler, Throughput, measure_iterator, throughput
from jaxload.tools.bench.windows import frames_per_sample

INSTALL_HINT = (
    "LeRobot is not installed. Install it for the benchmark with "
    "`bash scripts/install_lerobot.sh` (lerobot==0.4.4 and torchvision==0.28.0 without their "
    "dependency pins, plus what they import) or `pip install -e '.[bench]'`."
)
TORCHVISION_OPS = ("nms", "qnms")


def lerobot_available() -> bool:
    """Whether `lerobot` can be imported here (without importing it)."""
    return importlib.util.find_spec("lerobot") is not None


def import_lerobot_dataset() -> type:
    """`lerobot.datasets.lerobot_dataset.LeRobotDataset`, or ImportError with how to install it.

    Applies the torchvision workaround first (see `_torchvision_workaround`).
    """
    if not lerobot_available():
        raise ImportError(INSTALL_HINT)
    _torchvision_workaround()
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT}\n(importing lerobot failed: {e})") from e
    return LeRobotDataset


def _torchvision_workaround() -> None:
    """Lets torchvision's Python parts import when its compiled ops cannot load.

    Why: PyPI's torchvision 0.28 wheel is a CUDA build. Next to the CPU-only torch that
    jaxload pins, its `_C` extension fails to load, and torchvision's meta registrations
    then fail on `torchvision::nms` / `torchvision::qnms` not being defined, so importing
    torchvision (which lerobot does) raises. Defining those two operator schemas before
    the first torchvision import is enough for lerobot's dataset code, which never calls
    them. Done only when the ops are not registered and the extension does not load, so
    a working torchvision is left alone. Must run in every process before lerobot is
    imported (DataLoader workers too: see `_PicklableLeRobotDataset`).
    """
    import torch

    if _has_torchvision_ops(torch):
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return
    for lib in Path(spec.origin).parent.glob("_C*.so"):
        try:
            torch.ops.load_library(str(lib))
        except (OSError, RuntimeError):
            continue
        if _has_torchvision_ops(torch):
            return
    for op in TORCHVISION_OPS:
        torch.library.define(
            f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
        )


def _has_torchvision_ops(torch: Any) -> bool:
    try:
        for op in TORCHVISION_OPS:
            getattr(torch.ops.torchvision, op)
    except (AttributeError, RuntimeError):
        return False
    return True


class _PicklableLeRobotDataset:
    """A LeRobotDataset that DataLoader workers rebuild from its arguments.

    Spawned workers unpickle the dataset; unpickling a LeRobotDataset imports lerobot (and
    torchvision) before anything could apply the workaround. This wrapper pickles as
    (`_reopen`, arguments): the worker imports this module, applies the workaround, then
    opens the dataset itself (reading only its metadata and parquet, as unpickling would).
    """

    def __init__(self, root: str, repo_id: str, delta_timestamps: Mapping[str, Sequence[float]]):
        self.root, self.repo_id = str(root), repo_id
        self.delta_timestamps = {k: list(v) for k, v in delta_timestamps.items()}
        cls = import_lerobot_dataset()
        self.dataset = cls(
            repo_id,
            root=self.root,
            delta_timestamps=self.delta_timestamps,
            video_backend="torchcodec",
        )

    def __reduce__(self) -> tuple:
        return (_reopen, (self.root, self.repo_id, self.delta_timestamps))

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.dataset[i]


def _reopen(root: str, repo_id: str, delta_timestamps: dict) -> _PicklableLeRobotDataset:
    return _PicklableLeRobotDataset(root, repo_id, delta_timestamps)


def open_lerobot(
    root: str | os.PathLike,
    delta_timestamps: Mapping[str, Sequence[float]],
    repo_id: str | None = None,
) -> _PicklableLeRobotDataset:
    """LeRobotDataset over a local LeRobot v3.0 directory (no hub access), picklable."""
    root = Path(root)
    if not (root / "meta" / "info.json").is_file():
        raise FileNotFoundError(f"{root}: not a LeRobot dataset (no meta/info.json)")
    return _PicklableLeRobotDataset(str(root), repo_id or f"local/{root.name}", delta_timestamps)


def make_dataloader(dataset: Any, *, batch_size: int, num_workers: int, seed: int = 0) -> Any:
    """A torch DataLoader as openpi builds it: shuffled, spawned persistent workers, drop_last."""
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed)
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        multiprocessing_context="spawn" if num_workers > 0 else None,
        persistent_workers=num_workers > 0,
        drop_last=True,
        generator=generator,
    )


def measure_lerobot(
    root: str | os.PathLike,
    *,
    delta_timestamps: Mapping[str, Sequence[float]],
    num_workers: int = 2,
    batch_size: int = 32,
    seconds: float = 20.0,
    warmup_s: float = 5.0,
    seed: int = 0,
) -> Throughput:
    """LeRobotDataset + DataLoader on the LeRobot source at `root`: the same measures as jaxload.

    The clock for the time to first batch starts before the dataset is opened (lerobot is
    imported before it starts). Epochs repeat without end, like jaxload's loader.

    Example:
        >>> measure_lerobot("lerobot/ds", delta_timestamps={"action": [0.0, 1 / 30]}).samples_per_s
    """
    import_lerobot_dataset()  # import lerobot (seconds) before the clock starts
    windows = {k: list(v) for k, v in delta_timestamps.items()}
    prefetch_factor = 2  # torch's default per worker
    warmup_batches = num_workers * prefetch_factor + 2
    loaders: list[Any] = []

    def make() -> Iterator[Any]:
        dataset = open_lerobot(root, windows)
        loaders.append(
            make_dataloader(dataset, batch_size=batch_size, num_workers=num_workers, seed=seed)
        )
        loaders.append(dataset)
        return _repeat(loaders[0])

    with RssSampler() as rss:
        timing = measure_iterator(
            make,
            seconds=seconds,
            warmup_s=warmup_s,
            warmup_batches=warmup_batches,
            batch_len=lambda b: len(b["index"]),
        )
        teardown_error = _shutdown(loaders[0])
    cameras = loaders[1].dataset.meta.video_keys
    result = throughput(
        "lerobot", timing, frames_per_sample(windows, cameras), batch_size, num_workers, rss
    )
    result.details["video_backend"] = "torchcodec"
    if teardown_error:
        result.details["teardown_error"] = teardown_error
    return result


def _repeat(loader: Any) -> Iterator[Any]:
    """Epoch after epoch of a DataLoader (persistent workers carry over)."""
    while True:
        yield from loader


def _shutdown(loader: Any) -> str | None:
    """Stops a DataLoader's persistent workers now; returns the error if one died doing so.

    A LeRobot worker sometimes aborts while exiting ("terminate called without an active
    exception", from native decoder threads); the measurement is complete by then, so the
    error is recorded rather than raised.
    """
    iterator = getattr(loader, "_iterator", None)
    if iterator is None or not hasattr(iterator, "_shutdown_workers"):
        return None
    try:
        iterator._shutdown_workers()
    except RuntimeError as e:
        return str(e)
    return None
