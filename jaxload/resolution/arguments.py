"""make_loader's argument checks: integers in range, a stream long enough for one batch,
mixture weights. Each raises a ValueError naming the argument and the rule."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxload.sampling.weights import MixtureWeights
from jaxload.sources.source import DatasetSource

# Seeds key SplitMix64 hashes: unsigned 64-bit integers.
_SEED_LIMIT = 2**64


def check_arguments(**arguments: Any) -> None:
    """make_loader's numeric arguments: integers in range, or a ValueError naming the rule.

    Without this, 2.5 rows per batch failed as "not divisible by the host count 1", and
    seed=1.5, -1 or 2**64 silently gave the stream of another seed."""
    limits = {
        "global_batch_size": (1, None),
        "seed": (0, _SEED_LIMIT - 1),
        "num_epochs": (1, None),
        "drop_n_first_frames": (0, None),
        "drop_n_last_frames": (0, None),
        "mixture_block_size": (1, None),
        "host_index": (0, None),
        "host_count": (1, None),
    }
    optional = {"num_epochs", "mixture_block_size", "host_index", "host_count"}
    for name, value in arguments.items():
        if value is None and name in optional:
            continue
        low, high = limits[name]
        integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if not integral or value < low or (high is not None and value > high):
            rule = f"an integer >= {low}" + (" and < 2**64" if high is not None else "")
            raise ValueError(f"{name} must be {rule}, got {value!r}")


def check_yields_a_batch(epoch_size: int, num_epochs: int | None, global_batch_size: int) -> None:
    """A finite stream shorter than one global batch would end before its first batch."""
    if num_epochs is not None and num_epochs * epoch_size < global_batch_size:
        raise ValueError(
            f"global_batch_size {global_batch_size} is larger than the {num_epochs * epoch_size} "
            f"samples of num_epochs={num_epochs} (an epoch is {epoch_size} samples): the loader "
            "would yield no batch (the last incomplete batch is dropped); lower "
            "global_batch_size or raise num_epochs"
        )


def source_weights(sources: Sequence[DatasetSource]) -> list[float] | None:
    given = [s.weight for s in sources]
    if all(w is None for w in given):
        return None
    if any(w is None for w in given):
        raise ValueError("weights: give every dataset of a mixture a weight, or none")
    for source, w in zip(sources, given, strict=True):
        real = isinstance(w, numbers.Real) and not isinstance(w, bool)
        if not real or not math.isfinite(w) or w < 0:
            raise ValueError(f"{source.name}: weight must be a finite number >= 0, got {w!r}")
    return [float(w) for w in given]


def check_fits_in_memory(spec: Any, available: int | None = None) -> None:
    """A ValueError, with the estimate, when this host's batches in flight would take more
    than the memory available (`global_batch_size=10**8` ran to 22 GB and the OOM killer).

    In flight: the read threads' buffers (2 per thread), each worker's buffered batches
    (and its read threads'), the prefetch buffer and the batch being used."""
    from jaxload.placement.machine import probe_memory

    options = spec.options
    row_bytes = sum(
        math.prod(shape) * np.dtype(dtype).itemsize
        for shape, dtype in spec.schema.element_spec.values()
    )
    batch_bytes = row_bytes * len(spec.rows)
    readers = max(1, options.num_workers)
    in_flight = (
        readers * (2 * options.read_threads + options.worker_buffer_size) + options.prefetch + 1
    )
    available = probe_memory()[1] if available is None else available
    need = batch_bytes * in_flight
    if need > available:
        raise ValueError(
            f"global_batch_size={spec.global_batch_size}: this host's batches of "
            f"{len(spec.rows)} rows take {batch_bytes / 2**30:.2f} GiB each; with about "
            f"{in_flight} in flight (read threads, worker buffers, prefetch) that is "
            f"{need / 2**30:.1f} GiB, more than the {available / 2**30:.1f} GiB available "
            "here. Lower global_batch_size (or the windows, or PipelineOptions' buffers)"
        )


def rule_weights(
    rule: MixtureWeights, sources: Sequence[DatasetSource], sizes: dict[str, list[int]]
) -> list[float]:
    """A mixture's weights from a `MixtureWeights` rule and the datasets' sizes
    (`dataset_sizes`); each source's `weight` multiplies its own (None: 1)."""
    multipliers = []
    for source in sources:
        w = 1.0 if source.weight is None else source.weight
        real = isinstance(w, numbers.Real) and not isinstance(w, bool)
        if not real or not math.isfinite(w) or w < 0:
            raise ValueError(f"{source.name}: weight must be a finite number >= 0, got {w!r}")
        multipliers.append(float(w))
    return rule.resolve(sizes, multipliers).tolist()


def intended_weights(
    rule: MixtureWeights | None, sources: Sequence[DatasetSource], sizes: dict[str, list[int]]
) -> list[bool]:
    """Which datasets of a mixture the user meant to read: a positive explicit weight, or
    (a rule) a positive multiplier and a positive size (the default: every dataset)."""
    given = [s.weight for s in sources]
    if rule is None:
        return [w is None or w > 0 for w in given]
    size = [1] * len(sources) if rule.by == "uniform" else sizes[rule.by]
    return [(w is None or w > 0) and n > 0 for w, n in zip(given, size, strict=True)]


def check_shares(
    names: Sequence[str],
    intended: Sequence[bool],
    weights: Any,
    quota: Sequence[int] | None,
    rule: MixtureWeights | None = None,
) -> None:
    """A ValueError naming every dataset that was meant to be read but gets no slot of a
    mixture block (`quota`; None: one dataset), whatever produced its share: a tiny explicit
    weight, or a rule's weight that underflowed to 0 (`MixtureWeights(temperature=1e-300)`
    gave a dataset 0.00% of every batch, silently)."""
    if quota is None:
        return
    starved = [
        d for d, (want, q) in enumerate(zip(intended, quota, strict=True)) if want and q == 0
    ]
    if starved:
        listed = ", ".join(
            f"{names[d]} (weight {float(np.asarray(weights)[d]):.3g})"
            if weights is not None
            else names[d]
            for d in starved
        )
        larger = (
            "a MixtureWeights temperature closer to 1, a larger multiplier"
            if rule is not None
            else "a larger weight"
        )
        raise ValueError(
            f"mixture: {listed} would get 0% of every batch (its share rounds to no slot of "
            f"a mixture block); give it a larger share ({larger}), or leave it out of the "
            "mixture"
        )


def dataset_sizes(
    datasets: Sequence[Any], drop_n_first_frames: int = 0, drop_n_last_frames: int = 0
) -> dict[str, list[int]]:
    """Each dataset's frames, anchors (frames after the drops) and episodes."""
    lengths = [np.asarray(d.episode_lengths, np.int64) for d in datasets]
    drops = drop_n_first_frames + drop_n_last_frames
    return {
        "frames": [int(x.sum()) for x in lengths],
        "anchors": [int(np.maximum(x - drops, 0).sum()) for x in lengths],
        "episodes": [len(x) for x in lengths],
    }
