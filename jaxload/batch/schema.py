"""One batch schema for samples from one or several datasets, and collation into it.

Rules when datasets differ (documented in the README):

* A key some datasets lack (a camera, a feature) is zeros for them, and the batch gets a
  mask ``{key}_is_pad``: for a windowed key the existing ``(T,)`` mask, all True where the
  key is missing; otherwise a new bool scalar per sample, True where the key is missing.
* A vector feature whose last axis differs (state of size 8 in one dataset, 14 in another)
  is zero-padded at the end to the largest size, and the batch gets
  ``{key}_dim_is_pad`` of shape ``(D_max,)``, True on the padded dims.
* Any other difference (window lengths, dtypes, image sizes the image transforms leave
  different) is an error naming the key and the datasets. Cameras of different sizes
  share a key once transformed to one size: the schema is built from the cameras as the
  readers deliver them (jaxload.placement.transforms). Rename keys with
  ``key_maps`` (a key mapped to None is left out of the batch).
* ``dataset_index`` (int64) says which dataset each sample came from; ``task`` and string
  features (dtype ``str`` in a dataset's ``element_spec``) are numpy arrays of str (they
  cannot become ``jax.Array``s), ``""`` where a dataset lacks the key.

`collate` builds every key; which of them a loader's batch holds (by default neither the
strings nor, for one dataset, ``dataset_index``) is ``jaxload.batch.keys``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

Spec = Mapping[str, tuple[tuple[int, ...], Any]]
STRING_KEYS = ("task",)
PAD_SUFFIX = "_is_pad"
DIM_PAD_SUFFIX = "_dim_is_pad"


@dataclasses.dataclass(frozen=True)
class Field:
    """Shape (without batch axis), dtype and the value used where a dataset lacks the key."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fill: Any = 0


def rename_spec(
    spec: Spec, key_map: Mapping[str, str | None]
) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Apply a key map to a spec; `{key}_is_pad` follows its key, keys mapped to None are
    left out. Entries are `(shape, dtype)` or anything with `.shape` and `.dtype` (a
    dataset's `jax.ShapeDtypeStruct`s)."""
    out = {}
    for key, entry in spec.items():
        shape, dtype = (entry.shape, entry.dtype) if hasattr(entry, "dtype") else entry
        renamed = rename_key(key, key_map)
        if renamed is not None:
            out[renamed] = (tuple(shape), np.dtype(dtype))
    return out


def rename_key(key: str, key_map: Mapping[str, str | None]) -> str | None:
    """`key`'s name in the batch (None: left out of it)."""
    if key in key_map:
        return key_map[key]
    if key.endswith(PAD_SUFFIX) and key[: -len(PAD_SUFFIX)] in key_map:
        base = key_map[key[: -len(PAD_SUFFIX)]]
        return None if base is None else base + PAD_SUFFIX
    return key


def _unify(key: str, entries: list[tuple[int, tuple[int, ...], np.dtype]]) -> tuple[int, ...]:
    """The common shape of one key over the datasets that have it, or a clear error."""
    shapes = {shape for _, shape, _ in entries}
    dtypes = {dtype for _, _, dtype in entries}
    where = ", ".join(f"dataset {i}: {shape} {dtype}" for i, shape, dtype in entries)
    if len(dtypes) > 1:
        raise ValueError(f"key {key!r} has different dtypes across datasets ({where})")
    if len(shapes) == 1:
        return shapes.pop()
    ranks = {len(s) for s in shapes}
    leading = {s[:-1] for s in shapes}
    if len(ranks) == 1 and len(leading) == 1 and ranks.pop() in (1, 2):
        return (*leading.pop(), max(s[-1] for s in shapes))
    raise ValueError(
        f"key {key!r} has shapes that cannot share a batch ({where}); only the last axis of a "
        "vector feature is padded. Bring cameras to one size with image_transforms (make_loader's "
        "image_transforms=[jaxload.transforms.Resize((h, w))] runs on each dataset's frames "
        "before they share the key; DatasetSource(image_transforms=...) for one dataset) or "
        "at conversion (jaxload convert --resize HxW), or rename keys (DatasetSource cameras= "
        "or key_map)."
    )


class BatchSchema:
    """The fields of a batch and how each dataset's samples are written into them."""

    def __init__(
        self, specs: Sequence[Spec], key_maps: Sequence[Mapping[str, str | None]] | None = None
    ):
        key_maps = list(key_maps) if key_maps is not None else [{}] * len(specs)
        if len(key_maps) != len(specs):
            raise ValueError(f"{len(key_maps)} key maps for {len(specs)} datasets")
        self.key_maps = [dict(m) for m in key_maps]
        self.specs = [rename_spec(s, m) for s, m in zip(specs, self.key_maps, strict=True)]
        self.fields: dict[str, Field] = {}
        self.dim_pads: dict[str, list[np.ndarray | None]] = {}
        self._build()

    def _build(self) -> None:
        keys = sorted({k for spec in self.specs for k in spec if k not in STRING_KEYS})
        self.strings: dict[str, tuple[int, ...]] = {k: () for k in STRING_KEYS}
        for key in [k for k in keys if _is_string(self.specs, k)]:
            entries = [(i, s[key][0], s[key][1]) for i, s in enumerate(self.specs) if key in s]
            self.strings[key] = _unify(key, entries)
            keys.remove(key)
        for key in keys:
            entries = [(i, s[key][0], s[key][1]) for i, s in enumerate(self.specs) if key in s]
            shape = _unify(key, entries)
            fill = True if key.endswith(PAD_SUFFIX) else 0
            self.fields[key] = Field(shape, entries[0][2], fill)
            if len(entries) < len(self.specs) and not key.endswith(PAD_SUFFIX):
                self.fields.setdefault(key + PAD_SUFFIX, Field((), np.dtype(bool), True))
            if any(e[1] != shape for e in entries):
                self._add_dim_pad(key, shape)
        self.fields["dataset_index"] = Field((), np.dtype(np.int64), 0)
        # Scalar masks added for partly-missing keys: False (not padding) where a dataset has the key.
        self.present = [
            [
                k
                for k, f in self.fields.items()
                if f.shape == () and _base(k) in spec and k not in spec
            ]
            for spec in self.specs
        ]

    def _add_dim_pad(self, key: str, shape: tuple[int, ...]) -> None:
        masks = []
        for spec in self.specs:
            mask = np.ones(shape[-1], bool)
            if key in spec:
                mask[: spec[key][0][-1]] = False
            masks.append(mask)
        self.fields[key + DIM_PAD_SUFFIX] = Field((shape[-1],), np.dtype(bool), True)
        self.dim_pads[key + DIM_PAD_SUFFIX] = masks

    @property
    def element_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape (without batch axis) and dtype of every array key of a batch."""
        return {k: (f.shape, f.dtype) for k, f in self.fields.items()}

    def collate(
        self,
        samples: Sequence[Mapping[str, Any]],
        dataset_ids: np.ndarray,
        exclude: Collection[str] = (),
        arrays: Mapping[str, np.ndarray] | None = None,
    ) -> dict:
        """Stack samples (in order) into one batch dict; dataset_ids[i] is sample i's dataset.

        Keys in `exclude` (cameras left encoded for the training process) are not built.
        `arrays` are batch arrays already built for some keys (decoded video); they are used
        as they are, and samples that still carry such a key are written into them.
        """
        n = len(samples)
        out = {
            k: np.full((n, *f.shape), f.fill, f.dtype)
            for k, f in self.fields.items()
            if k not in exclude and k not in (arrays or {})
        }
        out.update(arrays or {})
        dataset_ids = np.asarray(dataset_ids, np.int64)
        out["dataset_index"][:] = dataset_ids
        for key, masks in self.dim_pads.items():
            out[key][:] = np.asarray(masks)[dataset_ids]
        for d, keys in enumerate(self.present):
            for key in keys:
                out[key][dataset_ids == d] = False
        strings = {k: np.full((n, *shape), "", dtype=object) for k, shape in self.strings.items()}
        for i, (sample, d) in enumerate(zip(samples, dataset_ids, strict=True)):
            self._write(out, strings, i, sample, int(d))
        for key, values in strings.items():
            out[key] = values.astype(str)
        return out

    def _write(self, out: dict, strings: dict, i: int, sample: Mapping[str, Any], d: int) -> None:
        spec, key_map = self.specs[d], self.key_maps[d]
        for raw_key, value in sample.items():
            key = rename_key(raw_key, key_map)
            if key is None:
                continue
            if key in strings:
                strings[key][i] = value
            elif key in out and key in spec:
                value = np.asarray(value)
                if value.shape == self.fields[key].shape:
                    out[key][i] = value
                else:
                    out[key][i, ..., : value.shape[-1]] = value


def _is_string(specs: Sequence[Spec], key: str) -> bool:
    """A key whose values are strings (dtype kind "U") in the datasets that have it."""
    return any(key in s and np.dtype(s[key][1]).kind == "U" for s in specs)


def _base(key: str) -> str | None:
    """The key a `{key}_is_pad` mask belongs to."""
    return key[: -len(PAD_SUFFIX)] if key.endswith(PAD_SUFFIX) else None
