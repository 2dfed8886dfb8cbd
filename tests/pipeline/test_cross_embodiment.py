"""One policy, four robots (issue 34): four generated LeRobot datasets that differ in fps
(15/25/10/30), codecs (AV1, H.264, PNG `image` features), camera names and sizes (64x64 to
480x640), state/action sizes (6 to 14) and tasks, converted for real, in one make_loader
call with one window spec and one resize. Checked: fixed shapes with masks, each row's
values against its own dataset, per-dataset normalisation against each dataset's own
stats, exact block quotas, exact resume and a 4 -> 2 host restore through Orbax, worker
processes giving the same batches, and the errors a newcomer meets."""

from __future__ import annotations

import numpy as np
import pytest

import jaxload
from jaxload import DatasetSource, PipelineOptions
from jaxload.errors import CheckpointError, WindowError
from jaxload.transforms import Resize
from tests.pipeline.test_checkpoint import _restore, _save
from tests.pipeline.test_loader import assert_batches_equal
from tests.support.embodiments import (
    CAMERAS,
    PRIMARY,
    SPECS,
    WRIST,
    convert_embodiments,
    write_embodiments,
)

pytestmark = pytest.mark.integration

WINDOWS = {"action": range(8), "observation.state": [-1, 0]}  # frames, at each dataset's fps
MODES = {"observation.state": "mean_std", "action": "min_max"}
G = 16


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("embodiments")
    return convert_embodiments(write_embodiments(root / "src"), root / "out")


def _sources(converted):
    return [DatasetSource(converted[name], cameras=CAMERAS[name]) for name in SPECS]


def _loader(converted, options=None, **kw):
    kw.setdefault("host_index", 0)
    kw.setdefault("host_count", 1)
    return jaxload.make_loader(
        _sources(converted),
        global_batch_size=G,
        seed=5,
        delta_frames=WINDOWS,
        image_transforms=[Resize((64, 64))],
        weights=jaxload.MixtureWeights(by="frames", temperature=2.0),
        mixture_block_size=G,
        options=options or PipelineOptions(num_workers=0),
        **kw,
    )


def test_one_call_serves_four_embodiments_in_fixed_shapes_with_masks(converted):
    loader = _loader(converted)
    spec = loader.element_spec
    quota = loader.spec.stream.mixture.quota
    assert quota.sum() == G and (quota > 0).all()
    for _ in range(3):
        batch = next(loader)
        assert set(spec) == set(batch)
        for key, struct in spec.items():
            assert (batch[key].shape, batch[key].dtype) == (struct.shape, struct.dtype), key
        ids = batch["dataset_index"]
        assert np.array_equal(np.bincount(ids, minlength=4), quota)  # one batch = one block
        assert batch["action"].shape == (G, 8, 14) and batch["observation.state"].shape == (
            G,
            2,
            14,
        )
        assert batch[PRIMARY].shape == batch[WRIST].shape == (G, 64, 64, 3)
        assert np.array_equal(batch[f"{WRIST}_is_pad"], ids == 3)  # the mobile base has none
        assert not batch[WRIST][ids == 3].any() and batch[PRIMARY].reshape(G, -1).any(1).all()
        for row in range(G):
            _check_row(loader, batch, row)


def _check_row(loader, batch, row):
    """The row's values are its own dataset's frames: state[0] = episode * 10000 + frame,
    action[0] = state + 0.5, windows counted in that dataset's frames, dims padded."""
    d = int(batch["dataset_index"][row])
    name = list(SPECS)[d]
    state_dim, action_dim = SPECS[name]["state_dim"], SPECS[name]["action_dim"]
    ds = loader.datasets[d]
    episode, frame = int(batch["episode_index"][row]), int(batch["frame_index"][row])
    length = int(ds.episode_lengths[list(ds.episode_index).index(episode)])
    want = np.clip(frame + np.arange(8), 0, length - 1)
    assert np.array_equal(batch["action"][row, :, 0], episode * 10000 + want + 0.5)
    assert np.array_equal(batch["action_is_pad"][row], frame + np.arange(8) > length - 1)
    assert batch["observation.state"][row, 1, 0] == episode * 10000 + frame
    assert batch["observation.state_is_pad"][row, 0] == (frame == 0)
    assert np.array_equal(batch["action_dim_is_pad"][row], np.arange(14) >= action_dim)
    assert np.array_equal(batch["observation.state_dim_is_pad"][row], np.arange(14) >= state_dim)
    assert not batch["action"][row, :, action_dim:].any()


def test_each_row_is_normalised_with_its_own_datasets_stats(converted):
    norm = jaxload.Normalize.from_datasets(_sources(converted), MODES, per_dataset=True)
    raw, normed = next(_loader(converted)), next(_loader(converted, batch_transform=norm))
    stats = [jaxload.stats.load_stats(converted[name]) for name in SPECS]
    for row in range(G):
        d = int(raw["dataset_index"][row])
        s = stats[d]["observation.state"]
        width = s.mean.shape[0]
        x = raw["observation.state"][row, :, :width]
        assert np.allclose(
            normed["observation.state"][row, :, :width], (x - s.mean) / (s.std + 1e-8), atol=1e-4
        )
        assert not normed["observation.state"][row, :, width:].any()  # padding stays zero
        a = stats[d]["action"]
        width = a.mean.shape[0]
        scaled = 2 * (raw["action"][row, :, :width] - a.min) / (a.max - a.min + 1e-8) - 1
        assert np.allclose(normed["action"][row, :, :width], scaled, atol=1e-4)
    pooled = jaxload.Normalize.from_datasets(_sources(converted), MODES)
    assert pooled(raw)["action"].shape == raw["action"].shape  # 6, 7 and 14 values pooled


def test_resume_is_exact_and_elastic_from_4_to_2_hosts(converted, tmp_path):
    whole = _loader(converted)
    reference = [next(whole) for _ in range(4)]
    hosts = [_loader(converted, host_index=h, host_count=4) for h in range(4)]
    before = [[next(h) for _ in range(2)] for h in hosts]
    for k in range(2):
        got = {key: np.concatenate([b[k][key] for b in before]) for key in before[0][k]}
        assert_batches_equal([got], [reference[k]])
    _save(tmp_path / "ckpt", 2, hosts[0])
    after = [_loader(converted, host_index=h, host_count=2) for h in range(2)]
    for host in after:
        _restore(tmp_path / "ckpt", host)
    parts = [[next(h) for _ in range(2)] for h in after]
    for k in range(2):
        got = {key: np.concatenate([p[k][key] for p in parts]) for key in parts[0][k]}
        assert_batches_equal([got], [reference[2 + k]])


@pytest.mark.processes
def test_worker_processes_read_the_same_batches(converted):
    with _loader(converted, options=PipelineOptions(num_workers=2)) as loader:
        got = [next(loader) for _ in range(3)]
    plain = _loader(converted)
    assert_batches_equal(got, [next(plain) for _ in range(3)])


def test_what_a_newcomer_trips_on_is_explained(converted, tmp_path):
    paths = [converted[name] for name in SPECS]
    with pytest.raises(
        WindowError,
        match=r"arm_av1_15fps \(15 fps\).*nearest valid values are \[0.066667, 0.133333\].*delta_frames=",
    ):
        jaxload.make_loader(
            paths, global_batch_size=G, delta_timestamps={"action": [k / 30 for k in range(4)]}
        )
    snapped = jaxload.make_loader(
        paths,
        global_batch_size=G,
        delta_timestamps={"action": [k / 30 for k in range(4)]},
        snap_windows=True,
        image_transforms=[Resize((32, 32))],
    )
    # 0, 1/30, 2/30, 3/30 s snapped to the 25 fps grid: 0, 0.04, 0.08, 0.12 s = frames 0..3
    assert snapped.datasets[1].window_frames["action"].tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"has shapes that cannot share a batch.*Resize"):
        jaxload.make_loader(
            [converted["arm_av1_15fps"], converted["mobile_av1_30fps"]],
            global_batch_size=G,
            key_maps=[{"observation.images.top": "cam"}, {"observation.images.front": "cam"}],
        )
    with pytest.warns(UserWarning, match=r"of the 'action' window's slots.*delta_frames"):
        jaxload.make_loader(
            paths[3], global_batch_size=4, delta_timestamps={"action": list(range(8))}
        )
    loader = _loader(converted)
    next(loader)
    _save(tmp_path / "ckpt", 1, loader)
    other = jaxload.make_loader(
        _sources(converted),
        global_batch_size=G,
        seed=5,
        delta_frames={"action": range(4)},
        image_transforms=[Resize((64, 64))],
        weights=jaxload.MixtureWeights(by="frames", temperature=2.0),
        mixture_block_size=G,
        options=PipelineOptions(num_workers=0),
    )
    with pytest.raises(
        CheckpointError,
        match=r"dataset 0 .*arm_av1_15fps.*windows changed.*'action': frames 0..7 saved, 0..3 now; 'observation.state'",
    ):
        _restore(tmp_path / "ckpt", other)
