"""`EpisodeDataset`: what the loader needs of a dataset, written down.

A loader reads datasets through this protocol only: `jaxload.open`'s `JaxloadDataset`
implements it, and any other map-style dataset over frames (`len`, `ds[i]`, and
`episode_lengths`) is wrapped once by `MapDataset` when a loader is made. Nothing in the
loader asks a dataset what it can do; it is all here::

    dataset = as_episode_dataset(obj)            # JaxloadDataset as is; others wrapped
    samples, cameras = dataset.read(positions, ReadHints(plan=..., context=...))

`cameras` holds, per camera key, either its frames still compressed
(`jaxload.decode.frames.EncodedFrames`: the loader decodes them, in the readers or on the
devices) or its frames decoded (a numpy array, one entry per position); `samples` holds
every other key.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

Sample = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ReadHints:
    """What the loader's read stage knows of a read before it happens.

    Attributes:
        plan: `plan_read` of the same positions, made ahead (`jaxload.storage.prefetch`);
            used only where it is theirs.
        context: what the read stage tells a remote store of this read
            (`jaxload.storage.remote.ReadContext`).
    """

    plan: Any = None
    context: Any = None


@runtime_checkable
class EpisodeDataset(Protocol):
    """A dataset of frames grouped in episodes, as the loader reads it.

    Attributes:
        name: its path or URL (credentials removed), for messages and the loader state.
        fingerprint: same value <=> same samples (content, selected episodes, windows).
        content_fingerprint: the content's alone (what the state's view names).
        episode_index: the selected episodes' indices, in order.
        episode_lengths: their lengths in frames; position p of the dataset is frame p of
            their concatenation.
        fps: frames per second (None: unknown).
        window_frames: per windowed key, its frame offsets from the anchor (integers).
        camera_keys: the camera keys of a sample.
        video_cameras: the cameras `read` returns compressed -> their stream
            (`jaxload.format.layout.Camera`: codec, height, width).
        tasks: task_index -> task string ({} when it has no task table).
        storage: where its files live (`jaxload.format.storage.DatasetStorage`), or None.
        remote_store: its `jaxload.storage.remote.RemoteStore` when read from object
            storage (fetching ahead, read counters), else None.
    """

    name: str
    fingerprint: str
    content_fingerprint: str
    episode_index: np.ndarray
    episode_lengths: np.ndarray
    fps: float | None
    window_frames: Mapping[str, np.ndarray]
    camera_keys: Sequence[str]
    video_cameras: Mapping[str, Any]
    tasks: Mapping[int, str]
    storage: Any
    remote_store: Any

    def __len__(self) -> int: ...

    def element_spec(self) -> Mapping[str, Any]:
        """Per key of a sample except "task": a `jax.ShapeDtypeStruct` or (shape, dtype)."""
        ...

    def read(
        self, positions: Sequence[int], hints: ReadHints | None = None
    ) -> tuple[list[Sample], dict[str, Any]]:
        """(samples without their camera keys, camera key -> its frames at `positions`:
        `EncodedFrames` for the `video_cameras`, a numpy array (positions first) for the
        others)."""
        ...

    def plan_read(self, positions: Sequence[int]) -> Any:
        """What reading `positions` reads, worked out ahead (`record_keys()`: the
        (shard, record) pairs); None when the dataset has nothing to fetch ahead."""
        ...


class MapDataset:
    """Any map-style dataset over frames, as an `EpisodeDataset`.

    The wrapped dataset needs `len(ds)`, `ds[i]` (a dict of numpy arrays and strings) and
    `episode_lengths`; it may have `__getitems__` (a batched read), `camera_keys`,
    `episode_index`, `fingerprint`, `fps`, `delta_timestamps` (seconds), `element_spec()`,
    `tasks` (task_index -> string) and `path`. What it has is read here, once, when it is wrapped.

    Example (make_loader does this for you)::

        ds = MapDataset(my_dataset)
        samples, cameras = ds.read([0, 5])  # cameras: key -> (2, ...) frames
    """

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self.episode_lengths = np.asarray(dataset.episode_lengths, np.int64)
        frames = int(self.episode_lengths.sum())
        if frames != len(dataset) or np.any(self.episode_lengths < 1):
            # Positions are frames of the episodes' concatenation: any other total would
            # leave frames unread or read past the end.
            raise ValueError(
                f"{type(dataset).__name__}: episode_lengths must be positive and add up to "
                f"len(dataset) = {len(dataset)}; they add up to {frames} "
                f"({self.episode_lengths.tolist()[:8]}{' ...' if len(self.episode_lengths) > 8 else ''})"
            )
        default_index = np.arange(len(self.episode_lengths), dtype=np.int64)
        self.episode_index = np.asarray(getattr(dataset, "episode_index", default_index))
        self.name = str(getattr(dataset, "path", type(dataset).__name__))
        self.fingerprint = str(getattr(dataset, "fingerprint", ""))
        self.content_fingerprint = self.fingerprint
        self.camera_keys = list(getattr(dataset, "camera_keys", ()))
        self.fps = getattr(dataset, "fps", None)
        windows = getattr(dataset, "delta_timestamps", None) or {}
        self.window_frames = (
            {
                k: np.round(np.asarray(v, np.float64).reshape(-1) * self.fps).astype(np.int64)
                for k, v in windows.items()
            }
            if self.fps
            else {}
        )
        self.video_cameras: dict[str, Any] = {}  # its frames come decoded
        self.tasks = dict(getattr(dataset, "tasks", None) or {})
        self.storage = self.remote_store = None
        self._batched = hasattr(dataset, "__getitems__")
        self._has_spec = hasattr(dataset, "element_spec")

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Sample:
        return self.dataset[index]

    def element_spec(self) -> Mapping[str, Any]:
        if self._has_spec:
            return self.dataset.element_spec()
        sample = self.dataset[0]
        return {k: (np.shape(v), np.asarray(v).dtype) for k, v in sample.items() if k != "task"}

    def read(
        self, positions: Sequence[int], hints: ReadHints | None = None
    ) -> tuple[list[Sample], dict[str, Any]]:
        positions = [int(p) for p in positions]
        if self._batched:
            samples = list(self.dataset.__getitems__(positions))
        else:
            samples = [self.dataset[p] for p in positions]
        cameras = {
            cam: np.stack([sample.pop(cam) for sample in samples])
            for cam in self.camera_keys
            if samples and cam in samples[0]
        }
        return samples, cameras

    def plan_read(self, positions: Sequence[int]) -> None:
        return None

    def __repr__(self) -> str:
        return f"MapDataset({self.dataset!r})"


def dataset_view(dataset: EpisodeDataset) -> dict[str, Any]:
    """What a dataset's view fingerprint covers, for the loader state's messages: its
    content fingerprint, a digest of its selected episodes and their lengths, and its
    windows in frames."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(dataset.episode_index, dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(dataset.episode_lengths, dtype="<i8").tobytes())
    return {
        "content": str(dataset.content_fingerprint),
        "episodes": h.hexdigest()[:16],
        "num_episodes": len(dataset.episode_lengths),
        "windows": {
            k: np.asarray(v, np.int64).tolist() for k, v in sorted(dataset.window_frames.items())
        },
    }


def is_dataset(obj: Any) -> bool:
    """Whether `obj` is a dataset (rather than a path or a list of them): an
    `EpisodeDataset`, or a map-style dataset with episode lengths that `MapDataset` wraps."""
    return isinstance(obj, EpisodeDataset) or (
        hasattr(obj, "episode_lengths") and hasattr(obj, "__getitem__")
    )


def as_episode_dataset(obj: Any) -> EpisodeDataset:
    """`obj` as the loader reads it: an `EpisodeDataset` as it is, any other map-style
    dataset wrapped in a `MapDataset`. A TypeError says what is missing."""
    if isinstance(obj, EpisodeDataset):
        return obj
    if is_dataset(obj):
        return MapDataset(obj)
    raise TypeError(
        f"{type(obj).__name__} is not a dataset: a loader reads jaxload.open's datasets, or "
        "map-style datasets over frames with `episode_lengths`, `len` and `ds[i]` "
        '(docs/LOADER.md, "Your own dataset")'
    )


class OpenedDatasets:
    """A loader's opened datasets, and the remote stores among them (fetching ahead, read
    counters); the `Loader` owns them and closes them once.

    Example:
        datasets = OpenedDatasets([jaxload.open("out/demo")])
        datasets[0].read([0, 1]); datasets.stores; datasets.close()
    """

    def __init__(self, datasets: Sequence[EpisodeDataset]):
        self.datasets = tuple(datasets)
        self.stores = {d: ds.remote_store for d, ds in enumerate(self.datasets) if ds.remote_store}

    def __getitem__(self, d: int) -> EpisodeDataset:
        return self.datasets[d]

    def __len__(self) -> int:
        return len(self.datasets)

    def __iter__(self) -> Any:
        return iter(self.datasets)

    def close(self) -> None:
        """Stop fetching ahead (a later read starts again)."""
        for store in self.stores.values():
            store.close()
