"""The loader's checkpoint state: a small JSON-able dict, and the checks on restoring it.

The sample at global position ``p`` is a pure function of the stream definition (datasets,
dropped frames, mixture) and the seed, so the whole iteration state is one integer: the
global position of the next batch. Everything else is there to refuse a restore that
would silently produce a different stream.

    {"format": "jaxload.loader_state", "version": 1, "position": 4096, "epoch": 0,
     "seed": 0, "global_batch_size": 64, "host_count": 4, "fingerprint": "…", …}
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.errors import CheckpointError

STATE_FORMAT = "jaxload.loader_state"
STATE_VERSION = 1


def stream_fingerprint(
    dataset_fingerprints: Sequence[str],
    episode_indices: Sequence[np.ndarray],
    episode_lengths: Sequence[np.ndarray],
) -> str:
    """Hex digest of the datasets' content ids and their selected episodes and lengths."""
    h = hashlib.sha256()
    for fp, idx, lengths in zip(
        dataset_fingerprints, episode_indices, episode_lengths, strict=True
    ):
        h.update(str(fp).encode())
        h.update(np.ascontiguousarray(idx, dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(lengths, dtype="<i8").tobytes())
        h.update(b"\0")
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class LoaderState:
    """What a checkpoint stores; `position` is the global sample position of the next batch."""

    position: int
    epoch: int
    seed: int
    global_batch_size: int
    host_count: int
    fingerprint: str
    dataset_fingerprints: tuple[str, ...]
    shuffle: bool
    drop_n_first_frames: int
    drop_n_last_frames: int
    mixture_quota: tuple[int, ...]
    epoch_size: int
    sources: tuple[str, ...] = ()  # paths, for messages only: a moved dataset still restores
    # per dataset what its view fingerprint covers (`jaxload.episode_dataset.dataset_view`), so that a refused
    # restore names what changed; states saved before it lack it
    views: tuple[dict[str, Any], ...] = ()
    format: str = STATE_FORMAT
    version: int = STATE_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["dataset_fingerprints"] = list(self.dataset_fingerprints)
        d["mixture_quota"] = list(self.mixture_quota)
        d["sources"] = list(self.sources)
        d["views"] = [dict(v) for v in self.views]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LoaderState:
        if not isinstance(d, Mapping) or d.get("format") != STATE_FORMAT:
            raise CheckpointError(f"not a jaxload loader state: {str(d)[:200]}")
        if d.get("version") != STATE_VERSION:
            raise CheckpointError(
                f"loader state version {d.get('version')} is not supported (this jaxload reads "
                f"version {STATE_VERSION})"
            )
        fields = dataclasses.fields(cls)
        names = {f.name for f in fields}
        required = {f.name for f in fields if f.default is dataclasses.MISSING}
        missing = required - set(d)
        if missing:
            raise CheckpointError(f"loader state lacks {sorted(missing)}")
        kw = {k: d[k] for k in names if k in d}
        for name in _COUNTS:  # a position of 24.7, True, -3 or 10**30 names no batch
            value = kw[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < _COUNTS[name]:
                raise CheckpointError(
                    f"loader state {name}={value!r}: not an integer >= {_COUNTS[name]}; the "
                    "state is damaged"
                )
            if value > _LARGEST:
                raise CheckpointError(
                    f"loader state {name}={value!r}: larger than any stream position "
                    f"(at most {_LARGEST}, int64); the state is damaged"
                )
        fingerprints = kw["dataset_fingerprints"]
        if not _digest(kw["fingerprint"]) or not (
            isinstance(fingerprints, list | tuple)
            and fingerprints
            and all(map(_digest, fingerprints))
        ):
            raise CheckpointError(
                f"loader state fingerprint={kw['fingerprint']!r}, dataset_fingerprints="
                f"{str(fingerprints)[:200]}: not the fingerprints a loader saves (strings); "
                "the state is damaged, so it cannot be checked against this loader's data"
            )
        kw["dataset_fingerprints"] = tuple(kw["dataset_fingerprints"])
        kw["mixture_quota"] = tuple(kw["mixture_quota"])
        kw["sources"] = tuple(kw.get("sources", ()))
        kw["views"] = tuple(kw.get("views") or ())
        return cls(**kw)

    @classmethod
    def from_json(cls, text: str, where: str = "loader state") -> LoaderState:
        """The state in `text`; a CheckpointError naming `where` when it is not JSON (a
        file cut short by a crash, say)."""
        try:
            raw = json.loads(text)
        except ValueError as e:
            raise CheckpointError(f"{where}: not valid JSON ({e}); the file is damaged") from e
        return cls.from_dict(raw)


_LARGEST = 2**63 - 1  # positions and counts are int64 (numpy) in the loader


def _digest(value: Any) -> bool:
    """Whether `value` can be a fingerprint as a loader saves it: a non-empty string."""
    return isinstance(value, str) and bool(value.strip())


# The integer fields of a state and the smallest value each may take.
_COUNTS = {
    "position": 0,
    "epoch": 0,
    "seed": 0,
    "global_batch_size": 1,
    "host_count": 1,
    "drop_n_first_frames": 0,
    "drop_n_last_frames": 0,
    "epoch_size": 1,
}


def _describe(state: LoaderState) -> str:
    fps = [fp[:12] for fp in state.dataset_fingerprints]
    where = f" at {list(state.sources)}" if state.sources else ""
    return f"dataset fingerprint(s) {fps}{where}"


def _what_changed(saved: LoaderState, current: LoaderState) -> str:
    """Which dataset of a refused restore changed, and how (content, episodes, windows)."""
    generic = (
        "loader checkpoint is from another dataset: it was saved for "
        f"{_describe(saved)}, but this loader reads {_describe(current)}. Restore onto the "
        "dataset (same content, episode selection and windows) the checkpoint was trained on."
    )
    if saved.dataset_fingerprints == current.dataset_fingerprints and saved.views == current.views:
        # Same datasets, same views: the stream fingerprint itself differs (a state edited,
        # or saved by another definition of the stream), not the data.
        return (
            f"loader checkpoint's stream fingerprint {saved.fingerprint[:12]}... is not this "
            f"loader's ({current.fingerprint[:12]}...), though it names the same datasets "
            f"({_describe(current)}): the state was edited or damaged. Restore a state this "
            "loader (or its run) saved."
        )
    if not saved.views or not current.views:
        return generic
    if len(saved.views) != len(current.views):
        return (
            f"loader checkpoint was saved reading {len(saved.views)} datasets "
            f"({list(saved.sources)}), this loader reads {len(current.views)} "
            f"({list(current.sources)}); the sample order would differ."
        )
    names = current.sources or tuple(f"dataset {i}" for i in range(len(current.views)))
    for i, (a, b) in enumerate(zip(saved.views, current.views, strict=True)):
        where = f"dataset {i} ({names[i]})" if current.sources else f"dataset {i}"
        if a.get("content") != b.get("content"):
            return (
                f"loader checkpoint does not match {where}: its content changed (content "
                f"fingerprint {str(a.get('content'))[:12]} saved, {str(b.get('content'))[:12]} "
                "now): it was reconverted from other data, or this is another dataset. Restore "
                "onto the dataset the checkpoint was trained on."
            )
        if a.get("episodes") != b.get("episodes"):
            return (
                f"loader checkpoint does not match {where}: its episode selection changed "
                f"({a.get('num_episodes')} episodes saved, {b.get('num_episodes')} now, or "
                "other episodes): the sample order would differ. Select the saved episodes."
            )
        if a.get("windows") != b.get("windows"):
            return (
                f"loader checkpoint does not match {where}: its windows changed "
                f"({_windows_change(a.get('windows') or {}, b.get('windows') or {})}); the "
                "order is the same but batches would hold other frames. Build the loader with "
                "the saved delta_timestamps/delta_frames."
            )
    return generic


def _windows_change(saved: Mapping[str, list], now: Mapping[str, list]) -> str:
    parts = []
    for key in sorted({*saved, *now}):
        a, b = saved.get(key), now.get(key)
        if a != b:
            parts.append(f"{key!r}: frames {_frames(a)} saved, {_frames(b)} now")
    return "; ".join(parts)


def _frames(offsets: list | None) -> str:
    if not offsets:
        return "none"
    if offsets == list(range(offsets[0], offsets[-1] + 1)) and len(offsets) > 3:
        return f"{offsets[0]}..{offsets[-1]}"
    return str(offsets)


def check_compatible(
    saved: LoaderState, current: LoaderState, *, allow_global_batch_size_change: bool = False
) -> None:
    """Raise CheckpointError if `saved` cannot continue on the loader described by `current`.

    The host count may differ (elastic restore). A different global batch size is refused
    unless explicitly allowed; then the stream continues from the same sample position. A
    refused dataset is named with what changed: content, episodes or windows.
    """
    if saved.fingerprint != current.fingerprint:
        raise CheckpointError(_what_changed(saved, current))
    for name in ("seed", "shuffle", "drop_n_first_frames", "drop_n_last_frames", "mixture_quota"):
        a, b = getattr(saved, name), getattr(current, name)
        if a != b:
            raise CheckpointError(
                f"loader checkpoint was saved with {name}={a!r} but this loader has {name}={b!r}; "
                "the sample order would differ. Build the loader with the saved value."
            )
    if saved.global_batch_size != current.global_batch_size:
        if not allow_global_batch_size_change:
            raise CheckpointError(
                f"loader checkpoint was saved with global_batch_size={saved.global_batch_size} "
                f"but this loader has {current.global_batch_size}. Pass "
                "allow_global_batch_size_change=True to continue from the same sample position "
                f"({saved.position}) with the new batch size."
            )
        warnings.warn(
            f"restoring a loader state saved with global_batch_size={saved.global_batch_size} "
            f"into global_batch_size={current.global_batch_size}: the stream continues at sample "
            f"{saved.position}, batch boundaries change from there",
            stacklevel=3,
        )
