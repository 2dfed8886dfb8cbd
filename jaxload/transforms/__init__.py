"""Transforms of samples and batches: image transforms keyed by (seed, position), and
normalization.

    image steps   Resize, ResizeWithPad, CenterCrop, RandomCrop, RandomResizedCrop,
                  RandomRotation (geometry.py), ColorJitter (color.py); ImageTransform is
                  their base (base.py), ImageTransforms runs a list of them (compose.py),
                  on CPU in the workers or on the devices (on_device.py), with random
                  numbers from keys.py
    Normalize     per-key normalization and its inverse (normalize.py), per dataset of a
                  mixture too, with the stats it needs (mixture_stats.py)

    augment = ImageTransforms([RandomResizedCrop((224, 224), scale=(0.8, 1.0)),
                               ColorJitter(brightness=0.3, contrast=0.3, hue=0.05)])
    loader = jaxload.make_loader(path, global_batch_size=64, image_transforms=augment)
"""

from jaxload.transforms.base import ImageTransform
from jaxload.transforms.color import ColorJitter
from jaxload.transforms.compose import ImageTransforms
from jaxload.transforms.geometry import (
    CenterCrop,
    RandomCrop,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    ResizeWithPad,
)
from jaxload.transforms.normalize import MODES, Normalize

__all__ = [
    "MODES",
    "CenterCrop",
    "ColorJitter",
    "ImageTransform",
    "ImageTransforms",
    "Normalize",
    "RandomCrop",
    "RandomResizedCrop",
    "RandomRotation",
    "Resize",
    "ResizeWithPad",
]
