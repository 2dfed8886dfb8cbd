"""Where a loader's image transforms run, and what shape each dataset's cameras have when
they meet under one batch key.

Two kinds of transforms, both keyed by (seed, global position):

* a source's own (`DatasetSource(image_transforms=...)`): always in the readers, on that
  dataset's frames, before they share a batch key with other datasets' (each dataset's
  own resize, crop, ...; their random streams are the dataset's own);
* the loader's (`make_loader(image_transforms=...)`), where `image_transforms_on` says:
  "cpu": in the readers too, right after the source's, still per dataset, so cameras of
  different sizes that the steps bring to one size share a key (a `Resize((224, 224))`
  serves 96x128 and 480x640 sources alike); "device": in the training process after
  decode, jitted over the global batch (needs `sharding`, and one size per key by then);
  "auto": "device" when the devices decode the video, else "cpu".

The batch schema (jaxload.batch.schema) is built from each dataset's cameras as
the readers deliver them (`resolve_image_transforms`' specs), so the shapes it unifies are
the transformed ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.batch.schema import rename_key
from jaxload.transforms.compose import ImageTransforms, as_image_transforms

PLACES = ("auto", "cpu", "device")
Spec = dict[str, tuple[tuple[int, ...], np.dtype]]


def resolve_image_transforms(
    value: Any,
    on: str,
    source_values: Sequence[Any],
    names: Sequence[str],
    cameras: Sequence[Sequence[str]],
    specs: Sequence[Mapping[str, tuple[tuple[int, ...], Any]]],
    key_maps: Sequence[Mapping[str, str | None]],
    encoded: Sequence[str],
    sharding: Any,
) -> tuple[ImageTransforms | None, str, tuple[ImageTransforms | None, ...], list[Spec]]:
    """(the loader's transforms bound to the batch's cameras or None, "cpu" | "device",
    each dataset's own transforms bound to its cameras' batch keys or None, each dataset's
    spec with its cameras as the readers deliver them).

    `value`: make_loader's `image_transforms`; `source_values`: each source's; `cameras`:
    each dataset's own camera keys; `specs`: each dataset's sample spec (its own keys)."""
    if on not in PLACES:
        raise ValueError(f"image_transforms_on={on!r}; choose one of {PLACES}")
    loader = as_image_transforms(value)
    own = [as_image_transforms(v) for v in source_values]
    after: list[Spec] = [
        {k: (tuple(e[0]), np.dtype(e[1])) for k, e in _entries(spec).items()} for spec in specs
    ]
    if loader is None and all(t is None for t in own):
        return None, "cpu", tuple(own), after
    batch_cams = [
        {rename_key(c, m): c for c in cams if rename_key(c, m) is not None}
        for cams, m in zip(cameras, key_maps, strict=True)
    ]
    if not any(batch_cams):
        raise ValueError(
            "image_transforms: the datasets have no cameras to transform (a map-style "
            "dataset of your own names its image keys in `camera_keys`)"
        )
    if on == "auto":
        on = "device" if encoded else "cpu"
    bound_own = tuple(
        _bind_own(t, d, names[d], cameras[d], batch_cams[d], after[d], encoded)
        if t is not None
        else None
        for d, t in enumerate(own)
    )
    if loader is None:
        return None, "cpu", bound_own, after
    if on == "device" and sharding is None:
        raise ValueError(
            "image_transforms_on='device' transforms the global batch on the devices: pass "
            "`sharding` (a NamedSharding over the batch axis), or use 'cpu'"
        )
    every = sorted({k for cams in batch_cams for k in cams})
    keys = every if loader.keys is None else list(loader.keys)
    unknown = [k for k in keys if k not in every]
    if unknown:
        raise ValueError(
            f"image_transforms keys {unknown} are not cameras of the batch (cameras: {every})"
        )
    if on == "cpu":
        if set(encoded) & set(keys):
            raise ValueError(
                f"image_transforms_on='cpu' with decode_device cameras {sorted(encoded)}: the "
                "readers never hold their frames (the devices decode them); use "
                "image_transforms_on='device' (or 'auto')"
            )
        for d, cams in enumerate(batch_cams):
            for key in [k for k in keys if k in cams]:
                after[d][cams[key]] = _output(loader, after[d][cams[key]], names[d], key)
        return loader.bound(keys), on, bound_own, after
    sizes: dict[str, dict[tuple[int, ...], list[str]]] = {}
    for d, cams in enumerate(batch_cams):
        for key in [k for k in keys if k in cams]:
            sizes.setdefault(key, {}).setdefault(after[d][cams[key]][0], []).append(names[d])
    for key, by_shape in sizes.items():
        if len(by_shape) > 1:
            where = "; ".join(f"{shape} in {ds}" for shape, ds in by_shape.items())
            raise ValueError(
                f"image_transforms_on='device' transforms the global batch, where camera "
                f"{key!r} must have one size, but it has several ({where}): resize them per "
                "source first (DatasetSource(image_transforms=[Resize((h, w))]), run in the "
                "readers) or use image_transforms_on='cpu'"
            )
    return loader.resolved({k: next(iter(s)) for k, s in sizes.items()}), on, bound_own, after


def _bind_own(
    transforms: ImageTransforms,
    d: int,
    name: str,
    cameras: Sequence[str],
    batch_cams: Mapping[str, str],
    spec: Spec,
    encoded: Sequence[str],
) -> ImageTransforms | None:
    """A source's transforms bound to its cameras' batch keys; `spec` updated in place."""
    own_cams = {c: k for k, c in batch_cams.items()}
    keys = sorted(own_cams) if transforms.keys is None else list(transforms.keys)
    unknown = [k for k in keys if k not in cameras]
    if unknown:
        raise ValueError(
            f"{name}: DatasetSource image_transforms keys {unknown} are not cameras of this "
            f"dataset (its cameras: {sorted(cameras)})"
        )
    keys = [k for k in keys if k in own_cams]  # cameras left out of the batch: nothing to do
    if not keys:
        return None
    on_devices = sorted(own_cams[k] for k in keys if own_cams[k] in encoded)
    if on_devices:
        raise ValueError(
            f"{name}: DatasetSource image_transforms run in the readers, but cameras "
            f"{on_devices} are decoded on the devices (decode_device): use decode_device='cpu'"
        )
    for key in keys:
        spec[key] = _output(transforms, spec[key], name, key)
    # The dataset's own random streams: never those of the loader's transforms or another's.
    return transforms.bound([own_cams[k] for k in keys], stream_prefix=f"dataset{d}:")


def _output(
    transforms: ImageTransforms, entry: tuple[tuple[int, ...], np.dtype], name: str, key: str
) -> tuple[tuple[int, ...], np.dtype]:
    try:
        return transforms.output_shape(entry[0]), np.dtype(transforms.dtype)
    except ValueError as e:
        raise ValueError(f"{name}: image_transforms on camera {key!r}: {e}") from None


def _entries(spec: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], Any]]:
    """A spec's entries as (shape, dtype), whether given so or as ShapeDtypeStructs."""
    return {
        k: (tuple(e.shape), e.dtype) if hasattr(e, "dtype") else (tuple(e[0]), e[1])
        for k, e in spec.items()
    }


def transform_rows(
    own: ImageTransforms | None,
    loader: ImageTransforms | None,
    key: str,
    frames: np.ndarray,
    positions: np.ndarray,
    seed: int,
) -> np.ndarray:
    """One dataset's rows of camera `key` (batch name) through its own transforms, then
    the loader's (those the readers run), as they arrive in the batch."""
    for transforms in (own, loader):
        if transforms is not None and key in (transforms.keys or ()):
            frames = transforms.apply_frames(key, frames, positions, seed)
    return frames


def transformed_spec(
    spec: dict[str, tuple[tuple[int, ...], Any]], transforms: ImageTransforms | None
) -> dict[str, tuple[tuple[int, ...], Any]]:
    """A batch spec ({key: (shape with batch axis, dtype)}) after the image transforms."""
    if transforms is None:
        return spec
    out = dict(spec)
    for key in transforms.keys or ():
        if key in out:
            shape, _ = out[key]
            out[key] = ((shape[0], *transforms.output_shape(shape[1:])), transforms.dtype)
    return out
