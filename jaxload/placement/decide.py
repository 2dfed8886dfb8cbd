"""Where a loader decodes its video and runs its image transforms, decided in one place
(`decide_placement`), on what is read (`jaxload.sources.read.ReadSpec`), never on a
half-built loader spec::

    placement = decide_placement(read, options, image_transforms, image_transforms_on)
    placement.decode_device, placement.encoded, placement.choice

The policy: a fixed device ("cpu", "cuda", "device"; "cuda" checked against NVDEC), or
"auto" (also what autotune leaves where the devices could decode): "cpu" without a GPU
that decodes every codec, else the faster of the CPU readers and the devices, measured on
the first batches (`jaxload.placement.choice`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxload.placement.choice import DecodeChoice, measure_decode_paths
from jaxload.placement.device import (
    cameras_decoded_on_device,
    default_decode_threads,
    device_streams,
    resolve_decode_device,
)
from jaxload.placement.transforms import Spec, resolve_image_transforms
from jaxload.sources.read import ReadSpec
from jaxload.transforms.compose import ImageTransforms


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where video is decoded and where image transforms run.

    Attributes:
        decode_device: "cpu" (in the readers), "cuda" or "device" (in the training
            process, each device decoding the rows it holds); never "auto" (decided
            here).
        encoded: batch keys of the cameras that travel compressed from the readers and are
            decoded in the training process; () when the readers decode everything.
        streams: (codec, height, width) of the encoded cameras' video streams (sizes the
            NVDEC decoder cache, `jaxload.decode.nvdec`).
        image_transforms: the image transforms bound to the batch's cameras, or None.
        image_transforms_on: "cpu" (in the readers) or "device" (jitted over the global
            batch after decode).
        decode_threads: decodes in flight per device when the devices decode (the
            options' value, or the GPUs' NVDEC engines); None when they do not.
        choice: what "auto" measured and chose, and why (None for a fixed device).
        source_transforms: per dataset, its own image transforms bound to its cameras'
            batch keys (None where it has none), run in the readers before the loader's.
    """

    decode_device: str = "cpu"
    encoded: tuple[str, ...] = ()
    image_transforms: ImageTransforms | None = None
    image_transforms_on: str = "cpu"
    streams: tuple[tuple[str, int, int], ...] = ()
    decode_threads: int | None = None
    choice: DecodeChoice | None = None
    source_transforms: tuple[ImageTransforms | None, ...] = ()

    @property
    def transforms_in_readers(self) -> ImageTransforms | None:
        """The image transforms the readers apply (None when the devices do)."""
        return self.image_transforms if self.image_transforms_on == "cpu" else None

    @property
    def transforms_on_devices(self) -> ImageTransforms | None:
        """The image transforms the devices apply after decode (None when the readers do)."""
        return self.image_transforms if self.image_transforms_on == "device" else None


def decide_placement(
    read: ReadSpec, options: Any, image_transforms: Any = None, image_transforms_on: str = "auto"
) -> tuple[Placement, list[Spec]]:
    """(where video is decoded and image transforms run, each dataset's sample spec with its
    cameras as the readers deliver them).

    Args:
        read: what is read (`jaxload.sources.read.ReadSpec`).
        options: the `jaxload.PipelineOptions` with their counts resolved; its
            `decode_device` is what was asked ("auto" included) and `decode_threads` the
            decodes in flight per device asked (None: the GPUs' NVDEC engines).
        image_transforms, image_transforms_on: make_loader's.

    Example:
        placement, specs = decide_placement(read, options.resolve())
    """
    asked, why = options.decode_device, []
    device = resolve_decode_device(asked, read.datasets, read.sharding, why)
    encoded = cameras_decoded_on_device(device, read.datasets, read.key_maps, read.sharding)
    threads = options.decode_threads
    if encoded and threads is None:
        threads = default_decode_threads(read.sharding)
    choice = None
    if asked == "auto" and device != "cpu" and encoded:
        # NVDEC can decode: time both sides on the first batches (jaxload.placement.choice)
        choice = measure_decode_paths(read, encoded, options, threads)
        if choice.device != device:
            device = choice.device
            encoded = cameras_decoded_on_device(device, read.datasets, read.key_maps, read.sharding)
    elif asked == "auto":
        choice = DecodeChoice(device, tuple(why))
    transforms, transforms_on, own, specs = resolve_image_transforms(
        image_transforms,
        image_transforms_on,
        [s.image_transforms for s in read.sources],
        read.names,
        [list(d.camera_keys) for d in read.datasets],
        [d.element_spec() for d in read.datasets],
        read.key_maps,
        encoded,
        read.sharding,
    )
    placement = Placement(
        decode_device=device,
        encoded=encoded,
        image_transforms=transforms,
        image_transforms_on=transforms_on,
        streams=device_streams(read.datasets, read.key_maps, encoded),
        decode_threads=threads if encoded else None,
        choice=choice,
        source_transforms=own,
    )
    return placement, specs
