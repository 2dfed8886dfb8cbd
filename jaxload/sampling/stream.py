"""The global sample stream: global position -> (dataset index, position in that dataset).

One dataset: position ``p`` is sample ``p % N`` of epoch ``p // N`` (``N`` = its anchors).
Several: a ``MixtureSchedule`` first picks the dataset and its own stream position, then
that dataset's ``EpochOrder`` picks the frame. A mixture's nominal epoch is the sum of the
datasets' anchor counts (it only sets ``num_epochs`` and the reported epoch; each dataset
cycles through its own epochs at the rate its weight dictates).

    stream = SampleStream([lengths_a, lengths_b], weights=[0.7, 0.3], seed=0)
    datasets, positions = stream.locate(np.arange(64))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxload.sampling.mixture import DEFAULT_BLOCK_SIZE, MixtureSchedule
from jaxload.sampling.permutation import EpochOrder


class SampleStream:
    """Deterministic, history-free map from global positions to samples of one or more datasets."""

    def __init__(
        self,
        episode_lengths: Sequence[Sequence[int] | np.ndarray],
        *,
        weights: Sequence[float] | None = None,
        seed: int = 0,
        shuffle: bool = True,
        drop_n_first_frames: int = 0,
        drop_n_last_frames: int = 0,
        mixture_block_size: int | None = DEFAULT_BLOCK_SIZE,
    ):
        if not episode_lengths:
            raise ValueError("need at least one dataset")
        self.orders = [
            EpochOrder(
                lengths,
                seed=seed,
                shuffle=shuffle,
                drop_n_first_frames=drop_n_first_frames,
                drop_n_last_frames=drop_n_last_frames,
                stream_id=i,
            )
            for i, lengths in enumerate(episode_lengths)
        ]
        if weights is not None and len(weights) != len(self.orders):
            raise ValueError(f"{len(weights)} weights for {len(self.orders)} datasets")
        if weights is None and len(self.orders) > 1:
            # Default mixture: proportional to the anchors, like concatenating the datasets.
            weights = [o.num_anchors for o in self.orders]
        self.mixture = (
            MixtureSchedule(weights, seed=seed, shuffle=shuffle, block_size=mixture_block_size)
            if len(self.orders) > 1
            else None
        )
        for i, order in enumerate(self.orders):
            used = self.mixture is None or self.mixture.quota[i] > 0
            if used and order.num_anchors == 0:
                raise ValueError(
                    f"dataset {i} has no valid anchors: every episode is at most "
                    f"drop_n_first_frames + drop_n_last_frames = "
                    f"{drop_n_first_frames + drop_n_last_frames} frames long"
                )
        self.epoch_size = sum(o.num_anchors for o in self.orders)

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dataset index, dataset position) for each global position; both in the shape
        of `positions` (the orders and the schedule work on flat arrays)."""
        shape = np.shape(positions)
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        if self.mixture is None:
            dataset = np.zeros(positions.shape, np.int64)
            return dataset.reshape(shape), self.orders[0].positions(positions).reshape(shape)
        dataset, stream_pos = self.mixture.locate(positions)
        out = np.empty(positions.shape, np.int64)
        for i, order in enumerate(self.orders):
            mask = dataset == i
            if mask.any():
                out[mask] = order.positions(stream_pos[mask])
        return dataset.reshape(shape), out.reshape(shape)
