"""Where image transforms run and the shapes cameras have when they share a batch key
(jaxload.placement.transforms): the loader's transforms in the readers ("cpu") or on the
devices ("device", one size per key), each source's own always in the readers, and every
refusal naming the dataset, the camera and the way out."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxload.placement.transforms import (
    resolve_image_transforms,
    transform_rows,
    transformed_spec,
)
from jaxload.transforms import CenterCrop, ImageTransforms, Resize

U8, F32 = np.dtype(np.uint8), np.dtype(np.float32)
TOP, WRIST = "observation.images.top", "observation.images.wrist"
SHARDING = object()  # only whether there is one matters here


def _spec(**cameras):
    spec = {"observation.state": ((4,), F32)}
    spec.update({f"observation.images.{k}": (shape, U8) for k, shape in cameras.items()})
    return spec


def _resolve(value, on="auto", own=None, specs=None, key_maps=None, encoded=(), sharding=None):
    specs = specs if specs is not None else [_spec(top=(96, 128, 3)), _spec(top=(480, 640, 3))]
    names = [f"ds{d}" for d in range(len(specs))]
    cameras = [[k for k in s if k.startswith("observation.images.")] for s in specs]
    return resolve_image_transforms(
        value,
        on,
        own if own is not None else [None] * len(specs),
        names,
        cameras,
        specs,
        key_maps if key_maps is not None else [{}] * len(specs),
        list(encoded),
        sharding,
    )


def test_no_transforms_leave_the_specs_as_the_datasets_give_them():
    struct = {TOP: jax.ShapeDtypeStruct((6, 8, 3), np.uint8)}  # a dataset's own spec form
    loader, on, own, specs = _resolve(None, specs=[struct, _spec(top=(6, 8, 3))])
    assert (loader, on, own) == (None, "cpu", (None, None))
    assert specs[0] == {TOP: ((6, 8, 3), U8)} and specs[1][TOP] == ((6, 8, 3), U8)


def test_the_loaders_transforms_in_the_readers_bring_sources_to_one_size():
    loader, on, own, specs = _resolve([Resize((32, 32))], on="cpu")
    assert on == "cpu" and own == (None, None) and loader.keys == (TOP,)
    assert [s[TOP] for s in specs] == [((32, 32, 3), U8)] * 2
    assert specs[0]["observation.state"] == ((4,), F32)  # not a camera: untouched


def test_auto_runs_them_where_the_video_is_decoded():
    assert _resolve([Resize((32, 32))])[1] == "cpu"
    same = [_spec(top=(96, 128, 3))] * 2
    loader, on, _, specs = _resolve(
        [Resize((32, 32))], specs=same, encoded=[TOP], sharding=SHARDING
    )
    assert on == "device"
    assert specs[0][TOP] == ((96, 128, 3), U8)  # the readers deliver it untransformed
    assert loader.output_shape((96, 128, 3)) == (32, 32, 3)


def test_on_devices_needs_sharding_and_one_size_per_key():
    with pytest.raises(ValueError, match="pass `sharding`"):
        _resolve([Resize((32, 32))], on="device")
    with pytest.raises(
        ValueError,
        match=r"camera 'observation.images.top' must have one size, but it has several "
        r"\(\(96, 128, 3\) in \['ds0'\]; \(480, 640, 3\) in \['ds1'\]\)",
    ):
        _resolve([Resize((32, 32))], on="device", sharding=SHARDING)


def test_frames_the_readers_never_hold_cannot_be_transformed_there():
    with pytest.raises(ValueError, match=r"decode_device cameras \['observation.images.top'\]"):
        _resolve([Resize((32, 32))], on="cpu", encoded=[TOP])


@pytest.mark.parametrize(
    "value, on, specs, message",
    [
        ([Resize((8, 8))], "gpu", None, r"image_transforms_on='gpu'; choose one of"),
        ([Resize((8, 8))], "cpu", [_spec()], "the datasets have no cameras to transform"),
        (
            ImageTransforms([Resize((8, 8))], keys=["observation.images.side"]),
            "cpu",
            None,
            r"keys \['observation.images.side'\] are not cameras of the batch \(cameras: "
            r"\['observation.images.top'\]\)",
        ),
        (
            [CenterCrop((200, 200))],
            "cpu",
            None,
            r"^ds0: image_transforms on camera 'observation.images.top': ",
        ),
    ],
)
def test_refusals_name_what_is_wrong(value, on, specs, message):
    with pytest.raises(ValueError, match=message):
        _resolve(value, on=on, specs=specs)


def test_a_sources_own_transforms_bind_to_its_cameras_batch_keys():
    specs = [_spec(top=(96, 128, 3), wrist=(48, 64, 3)), _spec(top=(480, 640, 3))]
    key_maps = [{WRIST: None}, {TOP: "observation.images.front"}]  # wrist left out; renamed
    own = [[Resize((16, 16))], [Resize((32, 32))]]
    loader, on, bound, after = _resolve(None, own=own, specs=specs, key_maps=key_maps)
    assert loader is None and on == "cpu"
    assert bound[0].keys == (TOP,) and bound[1].keys == ("observation.images.front",)
    assert bound[0].stream_prefix == "dataset0:" and bound[1].stream_prefix == "dataset1:"
    assert after[0][TOP] == ((16, 16, 3), U8) and after[0][WRIST] == ((48, 64, 3), U8)
    assert after[1][TOP] == ((32, 32, 3), U8)  # a dataset's spec keeps its own keys
    # Then the loader's, on the sizes the sources' brought to one.
    loader, _, _, after = _resolve([CenterCrop((8, 8))], on="cpu", own=own[:1] * 2)
    assert [s[TOP] for s in after] == [((8, 8, 3), U8)] * 2


def test_a_sources_own_transforms_refuse_what_they_cannot_transform():
    with pytest.raises(ValueError, match=r"^ds1: DatasetSource image_transforms keys \['nope'\]"):
        _resolve(None, own=[None, ImageTransforms([Resize((8, 8))], keys=["nope"])])
    with pytest.raises(ValueError, match=r"^ds0: .*cameras \['observation.images.top'\] are "):
        _resolve(None, own=[[Resize((8, 8))], None], encoded=[TOP], sharding=SHARDING)
    # Its only camera left out of the batch: nothing to run.
    _, _, bound, _ = _resolve(None, own=[[Resize((8, 8))], None], key_maps=[{TOP: None}, {}])
    assert bound == (None, None)
    named = ImageTransforms([Resize((8, 8))], keys=[TOP])  # also when named explicitly
    _, _, bound, after = _resolve(None, own=[named, None], key_maps=[{TOP: None}, {}])
    assert bound == (None, None) and after[0][TOP] == ((96, 128, 3), U8)


def test_rows_go_through_the_sources_transforms_then_the_loaders():
    frames = np.arange(2 * 8 * 8 * 3, dtype=np.uint8).reshape(2, 8, 8, 3)
    positions = np.arange(2)
    own = ImageTransforms([Resize((4, 4))]).bound([TOP])
    loader = ImageTransforms([CenterCrop((2, 2))]).bound([TOP])
    out = transform_rows(own, loader, TOP, frames, positions, seed=0)
    want = loader.apply_frames(TOP, own.apply_frames(TOP, frames, positions, 0), positions, 0)
    np.testing.assert_array_equal(out, want)
    assert out.shape == (2, 2, 2, 3)
    assert transform_rows(own, loader, WRIST, frames, positions, 0) is frames  # not theirs
    assert transform_rows(None, None, TOP, frames, positions, 0) is frames


def test_a_batch_spec_after_the_devices_transforms():
    spec = {TOP: ((4, 96, 128, 3), U8), WRIST: ((4, 48, 64, 3), U8), "index": ((4,), np.int64)}
    assert transformed_spec(spec, None) is spec
    floats = ImageTransforms([Resize((32, 32))], dtype="float32").bound([TOP])
    out = transformed_spec(spec, floats)
    assert out[TOP] == ((4, 32, 32, 3), "float32")
    assert out[WRIST] == spec[WRIST] and out["index"] == spec["index"]
    assert spec[TOP] == ((4, 96, 128, 3), U8)  # the given spec is not changed
