"""Where a loader's image transforms run: `image_transforms_on` resolved against the
cameras of the batch, the decode device and the sharding.

"cpu": in the readers (Grain workers), on numpy, before `batch_transform`.
"device": in the training process after decode, jitted over the global batch (needs
`sharding`); the only choice when the devices decode the video (the readers then never
hold frames). "auto": "device" when the devices decode, else "cpu".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jaxload.pipeline.batch_schema import BatchSchema, rename_key
from jaxload.transforms.compose import ImageTransforms, as_image_transforms

PLACES = ("auto", "cpu", "device")


def resolve_image_transforms(
    value: Any,
    on: str,
    datasets: Sequence[Any],
    key_maps: Sequence[Mapping[str, str]],
    schema: BatchSchema,
    encoded: Sequence[str],
    sharding: Any,
) -> tuple[ImageTransforms | None, str]:
    """(transforms bound to the batch's cameras, "cpu" | "device"), or (None, "cpu")."""
    if on not in PLACES:
        raise ValueError(f"image_transforms_on={on!r}; choose one of {PLACES}")
    transforms = as_image_transforms(value)
    if transforms is None:
        return None, "cpu"
    cameras = {
        rename_key(c, m): schema.fields[rename_key(c, m)].shape
        for d, m in zip(datasets, key_maps, strict=True)
        for c in getattr(d, "camera_keys", ())
    }
    if not cameras:
        raise ValueError("image_transforms: the datasets have no cameras to transform")
    transforms = transforms.resolved(cameras)
    if on == "auto":
        on = "device" if encoded else "cpu"
    if on == "device" and sharding is None:
        raise ValueError(
            "image_transforms_on='device' transforms the global batch on the devices: pass "
            "`sharding` (a NamedSharding over the batch axis), or use 'cpu'"
        )
    if on == "cpu" and set(encoded) & set(transforms.keys):
        raise ValueError(
            f"image_transforms_on='cpu' with decode_device cameras {sorted(encoded)}: the "
            "readers never hold their frames (the devices decode them); use "
            "image_transforms_on='device' (or 'auto')"
        )
    return transforms, on


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
