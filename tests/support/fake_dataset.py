"""An in-memory stand-in for `jaxload.open(...)` with the same interface, for loader tests.

Every value identifies its own position like the shared LeRobot fixtures do:
``observation.state[0] = episode_index * 10000 + frame_index``, ``action = state + 0.5``,
camera pixels are ``(index * 7 + channel) % 251``. Picklable, so Grain worker processes
can read it (it lives in an importable module, not in a test file).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np


class FakeDataset:
    def __init__(
        self,
        episode_lengths: Sequence[int],
        *,
        state_dim: int = 4,
        cameras: Mapping[str, tuple[int, int, int]] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        fps: int = 10,
        episode_index: Sequence[int] | None = None,
        salt: str = "",
    ):
        self.episode_lengths = np.asarray(episode_lengths, np.int64)
        self.episode_starts = np.concatenate([[0], np.cumsum(self.episode_lengths)[:-1]]).astype(
            np.int64
        )
        self.episode_index = (
            np.arange(len(self.episode_lengths), dtype=np.int64)
            if episode_index is None
            else np.asarray(episode_index, np.int64)
        )
        self.state_dim, self.fps = state_dim, fps
        self.cameras = dict(
            cameras if cameras is not None else {"observation.images.top": (6, 8, 3)}
        )
        self.camera_keys = list(self.cameras)
        self.delta_timestamps = dict(delta_timestamps or {})
        self._offsets = {
            k: np.round(np.asarray(v) * fps).astype(np.int64)
            for k, v in self.delta_timestamps.items()
        }
        h = hashlib.sha256(f"{salt}|{state_dim}|{sorted(self.cameras.items())}".encode())
        h.update(self.episode_lengths.tobytes())
        self.fingerprint = h.hexdigest()

    def __len__(self) -> int:
        return int(self.episode_lengths.sum())

    def _feature(self, key: str, ep: int, frames: np.ndarray, index: np.ndarray) -> np.ndarray:
        if key in self.cameras:
            h, w, c = self.cameras[key]
            px = (index[:, None, None, None] * 7 + np.arange(c)) % 251
            return np.broadcast_to(px, (len(frames), h, w, c)).astype(np.uint8)
        base = (self.episode_index[ep] * 10000 + frames).astype(np.float32)
        vec = np.stack([base] + [np.sin(base * (j + 1)) for j in range(self.state_dim - 1)], -1)
        return (vec + (0.5 if key == "action" else 0.0)).astype(np.float32)

    def __getitem__(self, position: int) -> dict:
        if not 0 <= position < len(self):
            raise IndexError(position)
        ep = int(np.searchsorted(self.episode_starts, position, side="right") - 1)
        frame = position - int(self.episode_starts[ep])
        length = int(self.episode_lengths[ep])
        out: dict = {}
        for key in ("observation.state", "action", *self.cameras):
            if key in self._offsets:
                raw = frame + self._offsets[key]
                frames = np.clip(raw, 0, length - 1)
                out[key] = self._feature(key, ep, frames, self.episode_starts[ep] + frames)
                out[f"{key}_is_pad"] = (raw < 0) | (raw >= length)
            else:
                out[key] = self._feature(key, ep, np.array([frame]), np.array([position]))[0]
        out["task"] = f"task {int(self.episode_index[ep]) % 2}"
        out["episode_index"] = np.asarray(self.episode_index[ep], np.int64)
        out["frame_index"] = np.asarray(frame, np.int64)
        out["index"] = np.asarray(position, np.int64)
        out["task_index"] = np.asarray(int(self.episode_index[ep]) % 2, np.int64)
        out["timestamp"] = np.asarray(frame / self.fps, np.float32)
        return out

    def __getitems__(self, positions: Sequence[int]) -> list[dict]:
        return [self[int(p)] for p in positions]

    def element_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        return {k: (v.shape, v.dtype) for k, v in self[0].items() if k != "task"}


def add_state_sum(batch: dict) -> dict:
    """A batch_transform for tests (module level, so worker processes can unpickle it)."""
    return {**batch, "state_sum": batch["observation.state"].sum(axis=-1)}
