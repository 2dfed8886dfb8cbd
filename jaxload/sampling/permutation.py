"""Epoch order: which frame (anchor) sits at each position of the sample stream.

The stream is the concatenation of epochs; epoch ``e`` is a permutation of the valid
anchors that depends only on ``(seed, stream_id, e)``. Nothing of size O(frames) is ever
held: the permutation is a keyed Feistel network with cycle walking (a bijection computed
per position), and an anchor rank becomes ``(episode, frame)`` by a binary search over
the per-episode cumulative anchor counts, which is O(episodes).

    order = EpochOrder(episode_lengths=[50, 3, 80], seed=0, drop_n_last_frames=5)
    order.num_anchors              # 45 + 0 + 75 = 120
    order.positions(np.arange(8))  # dataset positions of the first 8 samples of epoch 0
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_ROUND_STEP = _U64(0xD1B54A32D192ED03)
_MASK64 = (1 << 64) - 1
FEISTEL_ROUNDS = 8


def mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijective, well-avalanched hash of uint64 arrays."""
    z = np.asarray(z, dtype=_U64)
    # uint64 array arithmetic wraps modulo 2**64 silently, which is what we want.
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def stream_key(seed: int, stream_id: int) -> np.uint64:
    """A 64-bit key for one (seed, stream) pair; any Python int seed is accepted."""
    s = mix64(np.array([seed & _MASK64], dtype=_U64) + _GOLDEN)
    return mix64(s ^ mix64(np.array([stream_id & _MASK64], dtype=_U64) * _GOLDEN + _U64(1)))[0]


def round_keys(key: np.uint64, counters: np.ndarray, rounds: int = FEISTEL_ROUNDS) -> np.ndarray:
    """Round keys, shape (rounds, len(counters)): one key set per counter (e.g. per epoch)."""
    base = mix64(_U64(key) ^ mix64(np.asarray(counters, dtype=_U64) + _GOLDEN))
    steps = (np.arange(1, rounds + 1, dtype=_U64) * _ROUND_STEP)[:, None]
    return mix64(base[None, :] + steps)


class KeyedPermutation:
    """A bijection of [0, n) chosen by a key: balanced Feistel over 2**(2h) >= n plus cycle walking.

    Cycle walking (re-applying the network while the value is >= n) stays a bijection of
    [0, n) because it follows the cycles of a permutation of the larger domain; the domain
    is < 4n, so the expected number of walks per element is below 4.
    """

    def __init__(self, n: int):
        if n < 0:
            raise ValueError(f"permutation size must be >= 0, got {n}")
        self.n = int(n)
        bits = max(2, (max(self.n, 2) - 1).bit_length())
        self.half_bits = (bits + 1) // 2
        self._half_mask = _U64((1 << self.half_bits) - 1)

    def _network(self, x: np.ndarray, keys: np.ndarray) -> np.ndarray:
        hb = _U64(self.half_bits)
        left, right = x >> hb, x & self._half_mask
        for k in keys:
            left, right = right, left ^ (mix64(right ^ k) & self._half_mask)
        return (left << hb) | right

    def _network_inverse(self, x: np.ndarray, keys: np.ndarray) -> np.ndarray:
        hb = _U64(self.half_bits)
        left, right = x >> hb, x & self._half_mask
        for k in keys[::-1]:
            left, right = right ^ (mix64(left ^ k) & self._half_mask), left
        return (left << hb) | right

    def _walk(self, x: np.ndarray, keys: np.ndarray, step) -> np.ndarray:
        x = np.asarray(x, dtype=_U64).copy()
        keys = np.broadcast_to(keys, (keys.shape[0], x.shape[0]))
        todo = np.arange(x.shape[0])
        n = _U64(self.n)
        while todo.size:
            x[todo] = step(x[todo], keys[:, todo])
            todo = todo[x[todo] >= n]
        return x.astype(np.int64)

    def __call__(self, x: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Images of x (int array in [0, n)); keys has shape (rounds, 1) or (rounds, len(x))."""
        return self._walk(x, keys, self._network)

    def inverse(self, y: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Preimages of y under the same keys."""
        return self._walk(y, keys, self._network_inverse)


def valid_anchor_counts(
    episode_lengths: Sequence[int] | np.ndarray, drop_n_first_frames: int, drop_n_last_frames: int
) -> np.ndarray:
    """Anchors per episode: its length minus the dropped frames, never below zero."""
    if drop_n_first_frames < 0 or drop_n_last_frames < 0:
        raise ValueError("drop_n_first_frames and drop_n_last_frames must be >= 0")
    lengths = np.asarray(episode_lengths, dtype=np.int64)
    return np.maximum(lengths - drop_n_first_frames - drop_n_last_frames, 0)


class EpochOrder:
    """Stream position -> dataset position for one dataset, epoch after epoch.

    Stream position ``p`` is sample ``p % num_anchors`` of epoch ``p // num_anchors``. With
    ``shuffle=False`` every epoch is the anchors in source order. Memory: three int64
    arrays of length ``len(episode_lengths)``.
    """

    def __init__(
        self,
        episode_lengths: Sequence[int] | np.ndarray,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_n_first_frames: int = 0,
        drop_n_last_frames: int = 0,
        stream_id: int = 0,
    ):
        lengths = np.asarray(episode_lengths, dtype=np.int64)
        counts = valid_anchor_counts(lengths, drop_n_first_frames, drop_n_last_frames)
        self.seed, self.shuffle, self.stream_id = int(seed), bool(shuffle), int(stream_id)
        self.drop_n_first_frames = int(drop_n_first_frames)
        self.episode_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        # cum_anchors[i] = anchors before episode i; searchsorted over it finds an anchor's episode.
        self.cum_anchors = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.num_anchors = int(self.cum_anchors[-1])
        self._perm = KeyedPermutation(self.num_anchors)
        self._key = stream_key(self.seed, self.stream_id)

    def epoch_ranks(self, epochs: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Anchor rank (0-based, in source order) at `offsets` of each given epoch."""
        offsets = np.asarray(offsets, dtype=np.int64)
        if not self.shuffle or self.num_anchors <= 1:
            return offsets.copy()
        epochs = np.asarray(epochs, dtype=np.int64)
        uniq, inverse = np.unique(epochs, return_inverse=True)
        keys = round_keys(self._key, uniq)[:, inverse.reshape(-1)]
        return self._perm(offsets, keys)

    def ranks(self, positions: np.ndarray) -> np.ndarray:
        """Anchor ranks of stream positions (which may span several epochs)."""
        positions = self._check(positions)
        return self.epoch_ranks(positions // self.num_anchors, positions % self.num_anchors)

    def episode_and_frame(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(episode ordinal among the selected episodes, frame within it) of anchor ranks."""
        ranks = np.asarray(ranks, dtype=np.int64)
        episode = np.searchsorted(self.cum_anchors, ranks, side="right") - 1
        frame = ranks - self.cum_anchors[episode] + self.drop_n_first_frames
        return episode, frame

    def positions(self, stream_positions: np.ndarray) -> np.ndarray:
        """Dataset positions (0..len(ds)-1, source order) of stream positions."""
        episode, frame = self.episode_and_frame(self.ranks(stream_positions))
        return self.episode_starts[episode] + frame

    def _check(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        if self.num_anchors == 0:
            raise ValueError("no valid anchors: every episode is shorter than the dropped frames")
        if positions.size and positions.min() < 0:
            raise ValueError("stream positions must be >= 0")
        return positions
