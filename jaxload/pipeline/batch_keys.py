"""Which keys a batch holds: by default only what `jax.jit` accepts.

A collated batch also holds host-only values: ``task`` and string features (numpy arrays
of ``str``, which cannot become ``jax.Array``s), and ``dataset_index``. By default the
loader yields every key whose values are numeric or bool arrays, so ``next(loader)`` goes
into a jitted step as it is; ``dataset_index`` only when the loader reads a mixture (with
one dataset it is all zeros). `batch_transform` runs before the selection and sees every
key, so a tokenizer can turn ``task`` into token arrays, which are then kept. Name the keys
to hold any other set, strings included::

    loader = jaxload.make_loader("out/demo", global_batch_size=8,
                                 keys=["observation.state", "action", "task"])
    batch = next(loader)  # exactly these three keys; "task" is numpy str, as it must be
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import numpy as np

from jaxload.errors import BatchTransformError

# numpy dtype kinds a jax.Array cannot hold: str, bytes, Python objects.
HOST_ONLY_KINDS = "USO"
DATASET_INDEX = "dataset_index"


def is_host_only(value: Any) -> bool:
    """Whether `value` is a numpy array `jax.jit` refuses (strings, bytes, objects)."""
    return isinstance(value, np.ndarray) and value.dtype.kind in HOST_ONLY_KINDS


@dataclasses.dataclass(frozen=True)
class KeySelection:
    """The keys a batch holds.

    Attributes:
        keys: the keys to hold, in this order; None: every array key `jax.jit` accepts
            (`is_host_only` values left out), `dataset_index` only in a mixture.
        mixture: whether the loader reads more than one dataset.
        transform: the batch_transform's name, if there is one (for error messages).
    """

    keys: tuple[str, ...] | None
    mixture: bool
    transform: str | None = None

    def select(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """This selection of `batch`'s keys (which `batch_transform` has already seen)."""
        if self.keys is None:
            return {k: v for k, v in batch.items() if self.default_holds(k, v)}
        missing = [k for k in self.keys if k not in batch]
        if missing:
            raise BatchTransformError(
                f"keys= names {missing}, which the batch returned by batch_transform "
                f"{self.transform} does not hold; it holds {sorted(batch)}"
            )
        return {k: batch[k] for k in self.keys}

    def default_holds(self, key: str, value: Any = None) -> bool:
        """Whether the default selection keeps `key` (with `value`, if known)."""
        if key == DATASET_INDEX and not self.mixture:
            return False
        return not is_host_only(value)


def key_selection(
    keys: Iterable[str] | None,
    available: Collection[str],
    *,
    mixture: bool,
    transform: Any = None,
) -> KeySelection:
    """make_loader's `keys` argument checked: a collection of distinct key names, each in
    `available` (the collated batch's keys) unless a `transform` may add it."""
    name = None
    if transform is not None:
        name = getattr(transform, "__qualname__", None) or type(transform).__name__
    if keys is None:
        return KeySelection(None, mixture, name)
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise TypeError(f"keys must be a list of key names, got {keys!r}")
    keys = tuple(keys)
    bad = [k for k in keys if not isinstance(k, str)]
    if bad or not keys:
        raise TypeError(f"keys must be a non-empty list of str key names, got {list(keys)!r}")
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"keys lists {repeated} more than once")
    unknown = [k for k in keys if k not in available]
    if unknown and transform is None:
        raise ValueError(f"keys: a batch holds no {unknown}; it holds {sorted(available)}")
    return KeySelection(keys, mixture, name)
