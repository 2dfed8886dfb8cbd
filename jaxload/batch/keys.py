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


class Batch(dict):
    """A batch as the loader hands it out: a dict of arrays (a JAX pytree with a dict's
    keys and order) whose missing keys raise a `KeyError` that says why a key is missing
    and how to get it, e.g. for `batch["task"]`: strings are left out by default, pass
    `keys=[..., "task"]`.

    Example::

        batch = next(loader)
        batch["task"]  # KeyError: "'task' holds strings, which jax.jit cannot take, ..."
    """

    __slots__ = ("missing",)

    def __missing__(self, key: Any) -> Any:
        explain = getattr(self, "missing", None)
        raise KeyError(explain(key, self) if explain is not None else key)


@dataclasses.dataclass(frozen=True)
class MissingKeys:
    """Why a key is not in a loader's batch (`Batch.__missing__`'s message)."""

    selection: KeySelection
    strings: tuple[str, ...]  # the string keys a collated batch holds (task, features)
    fields: tuple[str, ...]  # its array keys

    def __call__(self, key: Any, batch: Mapping[str, Any]) -> str:
        held = sorted(map(str, batch))
        if key in self.strings:
            return (
                f"{key!r} holds strings, which jax.jit cannot take, so batches leave it out by "
                f"default: pass keys=[..., {key!r}] to make_loader to keep it (a numpy array of "
                "str with this host's rows), or turn it into arrays in a batch_transform (a "
                "tokenizer; it sees every key)"
            )
        if key == DATASET_INDEX and not self.selection.mixture and self.selection.keys is None:
            return (
                "'dataset_index' is left out of a one-dataset loader's batches (all zeros); "
                "pass keys=[..., 'dataset_index'] to make_loader to keep it"
            )
        if key in self.fields:
            return (
                f"{key!r} is not among the keys= given to make_loader "
                f"({list(self.selection.keys or ())}); add it there"
            )
        if isinstance(key, str) and key.endswith("_is_pad"):
            return (
                f"no {key!r}: a batch holds `{{key}}_is_pad` for windowed keys (delta_timestamps "
                "or delta_frames) and keys some datasets of a mixture lack; it holds "
                f"{held}"
            )
        return f"no key {key!r} in this batch; it holds {held}"


def register_batch_pytree() -> None:
    """Makes `Batch` a JAX pytree node with a dict's keys (sorted) and children, once."""
    import jax

    if getattr(register_batch_pytree, "done", False):
        return

    def flatten_with_keys(batch: Batch) -> tuple[tuple, tuple]:
        keys = tuple(sorted(batch))
        return tuple((jax.tree_util.DictKey(k), batch[k]) for k in keys), keys

    def flatten(batch: Batch) -> tuple[tuple, tuple]:
        keys = tuple(sorted(batch))
        return tuple(batch[k] for k in keys), keys

    def unflatten(keys: tuple, values: Iterable[Any]) -> Batch:
        return Batch(zip(keys, values, strict=True))

    jax.tree_util.register_pytree_with_keys(Batch, flatten_with_keys, unflatten, flatten)
    register_batch_pytree.done = True  # type: ignore[attr-defined]
