"""Mixtures of datasets that differ (issue 34), with in-memory datasets in one process:
cameras of different sizes meeting under one key after a resize, per-source image
transforms, cameras named per source (the others left out), and the mixture table.
Converted datasets: tests/pipeline/test_cross_embodiment.py. And `BatchSchema` itself on
element specs: missing cameras and state sizes padded, what cannot share a batch refused."""

from __future__ import annotations

import logging

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxload
from jaxload import DatasetSource, PipelineOptions
from jaxload.batch.schema import BatchSchema
from jaxload.transforms import ImageTransforms, RandomResizedCrop, Resize
from tests.support.fake_dataset import FakeDataset

CAM = "observation.images.top"


def _loader(sources, **kw):
    kw.setdefault("options", PipelineOptions(num_workers=0))
    return jaxload.make_loader(sources, host_index=0, host_count=1, **kw)


def _datasets():
    small = FakeDataset([5, 7], cameras={CAM: (6, 8, 3)}, state_dim=3, salt="a")
    large = FakeDataset([9, 4], cameras={CAM: (12, 20, 3), "wrist": (6, 8, 3)}, salt="b")
    return small, large


def test_cameras_of_different_sizes_share_a_key_after_the_loaders_resize():
    small, large = _datasets()
    with pytest.raises(ValueError, match=r"'observation.images.top' has shapes .*Resize"):
        _loader([small, large], global_batch_size=4)
    steps = [RandomResizedCrop((4, 4), scale=(0.5, 1.0))]
    loader = _loader([small, large], global_batch_size=6, seed=3, image_transforms=steps)
    batch = next(loader)
    assert batch[CAM].shape == (6, 4, 4, 3) and batch["wrist"].shape == (6, 4, 4, 3)
    assert batch["observation.state"].shape == (6, 4)
    assert batch["observation.state_dim_is_pad"].shape == (6, 4)
    # each row is its own dataset's frame, transformed as ImageTransforms.apply does it
    positions = np.arange(6)
    ids, ds_pos = loader.stream.locate(positions)
    augment = ImageTransforms(steps)
    for row, (d, p) in enumerate(zip(ids, ds_pos, strict=True)):
        raw = [small, large][d][int(p)][CAM][None]
        want = augment.apply_frames(CAM, raw, positions[row : row + 1], 3)
        assert np.array_equal(batch[CAM][row], want[0]), row
    assert np.array_equal(batch["wrist_is_pad"], ids == 0)
    assert not batch["wrist"][ids == 0].any()
    assert loader.element_spec[CAM].shape == (6, 4, 4, 3)


def test_a_sources_own_transforms_run_before_the_loaders_and_draw_apart():
    small, large = _datasets()
    sources = [
        DatasetSource(small),
        DatasetSource(large, image_transforms=[RandomResizedCrop((6, 8), scale=(0.5, 1.0))]),
    ]
    # cameras of one size after the source's crop: the loader's transforms may run on devices
    loader = _loader(sources, global_batch_size=6, seed=1, keys=[CAM, "dataset_index"])
    batch = next(loader)
    assert batch[CAM].shape == (6, 6, 8, 3)
    ids, ds_pos = loader.stream.locate(np.arange(6))
    own = ImageTransforms([RandomResizedCrop((6, 8), scale=(0.5, 1.0))], stream_prefix="dataset1:")
    for row in np.flatnonzero(ids == 1):
        raw = large[int(ds_pos[row])][CAM][None]
        want = own.apply_frames(CAM, raw, np.array([row]), 1)
        assert np.array_equal(batch[CAM][row], want[0])
    for row in np.flatnonzero(ids == 0):  # untouched
        assert np.array_equal(batch[CAM][row], small[int(ds_pos[row])][CAM])
    with pytest.raises(ValueError, match=r"keys \['nope'\] are not cameras of this dataset"):
        _loader(
            [
                DatasetSource(
                    large, image_transforms=ImageTransforms([Resize((4, 4))], keys=["nope"])
                )
            ],
            global_batch_size=2,
        )


def test_device_transforms_need_one_size_per_key():
    small, large = _datasets()
    mesh = jax.make_mesh((1,), ("data",))
    with pytest.raises(ValueError, match=r"must have one size.*DatasetSource\(image_transforms"):
        _loader(
            [small, large],
            global_batch_size=4,
            sharding=NamedSharding(mesh, P("data")),
            image_transforms=[Resize((4, 4))],
            image_transforms_on="device",
        )


def test_cameras_name_a_sources_cameras_and_leave_the_others_out():
    small, large = _datasets()
    sources = [
        DatasetSource(small, cameras={"primary": CAM, "wrist_cam": None}),
        DatasetSource(large, cameras={"primary": "wrist", "wrist_cam": CAM}),
    ]
    loader = _loader(sources, global_batch_size=6, image_transforms=[Resize((4, 4))])
    batch = next(loader)
    assert CAM not in batch and "wrist" not in batch
    assert batch["primary"].shape == batch["wrist_cam"].shape == (6, 4, 4, 3)
    ids = batch["dataset_index"]
    assert np.array_equal(batch["wrist_cam_is_pad"], ids == 0)
    assert "primary_is_pad" not in batch  # every dataset has it
    with pytest.raises(ValueError, match=r"cameras names \['nope'\], which this dataset"):
        _loader([DatasetSource(small, cameras={"primary": "nope"})], global_batch_size=2)
    with pytest.raises(ValueError, match="names 'wrist' for both"):
        DatasetSource(large, cameras={"a": "wrist", "b": "wrist"})


def test_the_mixture_table_is_logged_at_start(caplog):
    small, large = _datasets()
    with caplog.at_level(logging.INFO, logger="jaxload.mixture"):
        loader = _loader(
            [small, large],
            global_batch_size=4,
            image_transforms=[Resize((4, 4))],
            weights=jaxload.MixtureWeights(by="episodes"),
        )
    table = loader.mixture_table()
    assert table in caplog.text
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["dataset", "episodes", "frames"]
    assert "50.00%" in lines[1] and "50.00%" in lines[2]  # two episodes each
    # epochs per 1M samples: share x 1e6 / anchors (12 and 13 frames)
    assert f"{0.5e6 / 12:,.1f}" in lines[1] and f"{0.5e6 / 13:,.1f}" in lines[2]


@pytest.mark.parametrize(
    "weights",
    [
        jaxload.MixtureWeights(by="frames", temperature=1e-300),  # underflows to exactly 0
        jaxload.MixtureWeights(by="frames", temperature=0.05),  # positive, below any slot
        [1.0, 1e-12],  # an explicit weight too small for any block
    ],
)
def test_a_dataset_whose_share_rounds_to_no_slot_is_an_error_naming_it(weights):
    """Issue #44: temperature=1e-300 gave the smaller dataset 0.00% of every batch, silently
    (its weight underflowed to 0, and only positive weights were checked)."""
    small = FakeDataset([5, 7], state_dim=3, salt="a")
    small.path = "tiny"  # what messages name a dataset by
    large = FakeDataset([900, 400], state_dim=3, salt="b")
    sources = [DatasetSource(large), DatasetSource(small)]
    if isinstance(weights, list):
        sources = [DatasetSource(large, weight=weights[0]), DatasetSource(small, weight=weights[1])]
        weights = None
    with pytest.raises(
        ValueError, match=r"mixture: tiny \(weight .*\) would get 0% of every batch"
    ):
        _loader(sources, global_batch_size=4, weights=weights)


def test_a_weight_of_zero_given_on_purpose_still_leaves_a_dataset_out():
    small, large = FakeDataset([5, 7], salt="a"), FakeDataset([9, 4], salt="b")
    loader = _loader(
        [DatasetSource(small, weight=1.0), DatasetSource(large, weight=0.0)], global_batch_size=4
    )
    assert set(next(loader)["dataset_index"].tolist()) == {0}


def _spec(state=4, cams=(("top", (6, 8, 3)),), window=None):
    spec = {
        "observation.state": ((state,), np.dtype(np.float32)),
        "index": ((), np.dtype(np.int64)),
    }
    for name, shape in cams:
        spec[name] = ((window, *shape) if window else shape, np.dtype(np.uint8))
        if window:
            spec[f"{name}_is_pad"] = ((window,), np.dtype(bool))
    return spec


def _sample(spec, value):
    s = {k: np.full(shape, value, dtype) for k, (shape, dtype) in spec.items()}
    for k in s:
        if k.endswith("_is_pad"):
            s[k][:] = False
    s["task"] = f"task {value}"
    return s


def test_schema_pads_missing_cameras_and_state_sizes():
    a = _spec(state=4, cams=(("top", (6, 8, 3)),))
    b = _spec(state=7, cams=(("top", (6, 8, 3)), ("wrist", (4, 4, 3))))
    schema = BatchSchema([a, b])
    spec = schema.element_spec
    assert spec["observation.state"] == ((7,), np.dtype(np.float32))
    assert spec["observation.state_dim_is_pad"] == ((7,), np.dtype(bool))
    assert spec["wrist"] == ((4, 4, 3), np.dtype(np.uint8))
    assert spec["wrist_is_pad"] == ((), np.dtype(bool))
    assert "top_is_pad" not in spec
    batch = schema.collate([_sample(a, 1), _sample(b, 2), _sample(a, 3)], np.array([0, 1, 0]))
    assert batch["dataset_index"].tolist() == [0, 1, 0]
    assert batch["wrist_is_pad"].tolist() == [True, False, True]
    assert not batch["wrist"][0].any() and (batch["wrist"][1] == 2).all()
    assert batch["observation.state"][0].tolist() == [1, 1, 1, 1, 0, 0, 0]
    assert batch["observation.state_dim_is_pad"][0].tolist() == [False] * 4 + [True] * 3
    assert not batch["observation.state_dim_is_pad"][1].any()
    assert batch["task"].tolist() == ["task 1", "task 2", "task 3"]


def test_schema_windowed_missing_camera_is_all_pad():
    a = _spec(cams=(("top", (6, 8, 3)),), window=2)
    b = _spec(cams=(("top", (6, 8, 3)), ("wrist", (4, 4, 3))), window=2)
    schema = BatchSchema([a, b])
    assert schema.element_spec["wrist_is_pad"] == ((2,), np.dtype(bool))
    batch = schema.collate([_sample(a, 1), _sample(b, 2)], np.array([0, 1]))
    assert batch["wrist_is_pad"].tolist() == [[True, True], [False, False]]


def test_schema_refuses_what_cannot_share_a_batch_and_key_maps_fix_it():
    a = _spec(cams=(("cam", (6, 8, 3)),))
    b = _spec(cams=(("cam", (4, 4, 3)),))
    with pytest.raises(ValueError, match="'cam' has shapes that cannot share a batch"):
        BatchSchema([a, b])
    schema = BatchSchema([a, b], key_maps=[{}, {"cam": "cam_small"}])
    assert set(schema.element_spec) >= {"cam", "cam_small", "cam_is_pad", "cam_small_is_pad"}
    batch = schema.collate([_sample(b, 5)], np.array([1]))
    assert (batch["cam_small"] == 5).all() and batch["cam_is_pad"].tolist() == [True]
