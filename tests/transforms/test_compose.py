"""Image transforms keyed by (seed, global position): the same pixels for a position in any
process, worker count, host count and after an Orbax restore; CPU (numpy/OpenCV/torch)
and device (JAX) implementations agree within the tolerance docs/LOADER.md states; bad
arguments get clear errors. What each step does: test_geometry.py, test_color.py,
test_base.py.

Everything is real: converted ArrayRecord datasets, torchcodec decodes, Grain worker
processes, Orbax checkpoints. The "devices" are JAX CPU devices (no GPU here); the device
path is the same jitted code a GPU runs.
"""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import orbax.checkpoint as ocp
import pytest

import jaxload
from jaxload.checkpoint import LoaderRestore, LoaderSave
from jaxload.converters.convert import convert
from jaxload.transforms import (
    CenterCrop,
    ColorJitter,
    ImageTransforms,
    RandomCrop,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    ResizeWithPad,
)
from tests.support.lerobot_factory import write_lerobot_v3

REPO = Path(__file__).resolve().parents[2]
CAMERAS = {"observation.images.top": (60, 80), "observation.images.wrist": (48, 64)}
TOP, WRIST = CAMERAS
AUGMENT = [
    RandomResizedCrop((32, 40), scale=(0.5, 1.0)),
    RandomRotation(8),
    ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.05),
]
# CPU vs device (docs/LOADER.md, "Image transforms"): mean |difference| in uint8 levels,
# the share of values more than one level apart, and the largest difference anywhere.
MEAN_TOLERANCE, OFF_BY_MORE_THAN_ONE, MAX_TOLERANCE = 0.5, 0.01, 12


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("augment")
    src = write_lerobot_v3(
        root / "src", episode_lengths=(20, 7, 33, 12), cameras=CAMERAS, noise=6.0
    )
    convert(src, root / "ds", workers=1, gop=4, progress=False)
    return root / "ds"


def _frames(n=8, shape=(60, 80), seed=0):
    """Smooth but textured frames (a real camera's are neither flat nor white noise)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (n, shape[0] // 4, shape[1] // 4, 3), dtype=np.uint8)
    return np.stack([cv2.resize(f, shape[::-1], interpolation=cv2.INTER_CUBIC) for f in small])


def _loader(dataset, options=None, **kw):
    kw.setdefault("host_index", 0)
    kw.setdefault("host_count", 1)
    options = options or jaxload.PipelineOptions(num_workers=0)
    return jaxload.make_loader(dataset, global_batch_size=8, seed=5, options=options, **kw)


def _take(loader, n):
    with loader:
        return [next(loader) for _ in range(n)]


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)


# -- keys: a pure function of (seed, position) ----------------------------------------------


@pytest.mark.processes
def test_same_seed_and_position_give_identical_pixels_in_a_fresh_process():
    frames, positions = _frames(), np.arange(100, 108)
    here = ImageTransforms(AUGMENT).apply({"c": frames}, positions, seed=7)["c"]
    script = textwrap.dedent(
        f"""
        import hashlib, sys
        import numpy as np
        sys.path.insert(0, {str(REPO)!r})
        from tests.transforms.test_compose import AUGMENT, _frames
        from jaxload.transforms import ImageTransforms
        out = ImageTransforms(AUGMENT).apply({{"c": _frames()}}, np.arange(100, 108), seed=7)
        print(hashlib.sha256(out["c"].tobytes()).hexdigest())
        """
    )
    there = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    assert there == hashlib.sha256(here.tobytes()).hexdigest()


def test_rows_depend_on_their_position_and_the_seed_only():
    frame = np.repeat(_frames(1), 6, axis=0)  # six copies of one frame
    augment = ImageTransforms(AUGMENT)
    out = augment.apply({"c": frame}, np.array([3, 4, 3, 9, 4, 10]), seed=1)["c"]
    np.testing.assert_array_equal(out[0], out[2])  # same position, same pixels
    np.testing.assert_array_equal(out[1], out[4])
    assert not np.array_equal(out[0], out[1]) and not np.array_equal(out[3], out[5])
    other_seed = augment.apply({"c": frame}, np.array([3, 4, 3, 9, 4, 10]), seed=2)["c"]
    assert all(not np.array_equal(out[i], other_seed[i]) for i in range(6))
    # a row's pixels do not depend on which rows share its batch
    alone = augment.apply({"c": frame[:1]}, np.array([9]), seed=1)["c"]
    np.testing.assert_array_equal(alone[0], out[3])


def test_cameras_of_a_row_draw_independently():
    frames = _frames(4)
    augment = ImageTransforms([RandomCrop((30, 40))])
    out = augment.apply({"a": frames, "b": frames}, np.arange(4), seed=0)
    assert not np.array_equal(out["a"], out["b"])


# -- the loader: workers, hosts, restore -----------------------------------------------------


def test_loader_pixels_are_the_transform_of_the_rows_at_their_positions(dataset):
    plain = _take(_loader(dataset), 3)
    augmented = _take(_loader(dataset, image_transforms=AUGMENT), 3)
    augment = ImageTransforms(AUGMENT)
    for k, (raw, got) in enumerate(zip(plain, augmented)):
        expected = augment.apply(raw, positions=8 * k + np.arange(8), seed=5)
        _assert_same(got, expected)
        assert got[TOP].shape == (8, 32, 40, 3) and got[TOP].dtype == np.uint8


@pytest.mark.processes
def test_worker_count_and_host_count_do_not_change_the_pixels(dataset):
    reference = _take(_loader(dataset, image_transforms=AUGMENT), 3)
    with_workers = _take(
        _loader(dataset, image_transforms=AUGMENT, options=jaxload.PipelineOptions(num_workers=2)),
        3,
    )
    for a, b in zip(reference, with_workers):
        _assert_same(a, b)
    for hosts in (2, 4):
        parts = [
            _take(_loader(dataset, image_transforms=AUGMENT, host_index=h, host_count=hosts), 3)
            for h in range(hosts)
        ]
        for k, whole in enumerate(reference):
            joined = {key: np.concatenate([p[k][key] for p in parts]) for key in whole}
            _assert_same(whole, joined)


@pytest.mark.processes
def test_orbax_restore_mid_epoch_with_workers_continues_with_the_same_pixels(dataset, tmp_path):
    def loader():
        return _loader(
            dataset, image_transforms=AUGMENT, options=jaxload.PipelineOptions(num_workers=2)
        )

    uninterrupted = _take(loader(), 7)
    first = loader()
    with first:
        for _ in range(3):
            next(first)
        with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
            mngr.save(3, args=ocp.args.Composite(loader=LoaderSave(first)))
            mngr.wait_until_finished()
    restored = loader()
    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
        mngr.restore(3, args=ocp.args.Composite(loader=LoaderRestore(restored)))
    for want, got in zip(uninterrupted[3:], _take(restored, 4)):
        _assert_same(want, got)


def test_windowed_cameras_share_a_rows_parameters_across_slots(dataset):
    window = {TOP: [-0.1, 0.0]}
    batches = _take(
        _loader(dataset, image_transforms=[RandomCrop((40, 50))], delta_timestamps=window), 2
    )
    raw = _take(_loader(dataset, delta_timestamps=window), 2)
    for k, (got, plain) in enumerate(zip(batches, raw)):
        assert got[TOP].shape == (8, 2, 40, 50, 3)
        params = ImageTransforms([RandomCrop((40, 50))]).draw(
            TOP, 8 * k + np.arange(8), 5, (2, 60, 80, 3)
        )[0]
        for r in range(8):
            t, l = params["top"][r], params["left"][r]  # noqa: E741
            np.testing.assert_array_equal(got[TOP][r], plain[TOP][r][:, t : t + 40, l : l + 50])


def test_float_output_keys_and_element_spec(dataset):
    augment = ImageTransforms([Resize((24, 32))], keys=[WRIST], dtype="float32")
    loader = _loader(dataset, image_transforms=augment)
    spec = loader.element_spec
    (batch,) = _take(loader, 1)
    assert batch[WRIST].dtype == np.float32 and batch[WRIST].shape == (8, 24, 32, 3)
    assert batch[WRIST].min() >= 0.0 and batch[WRIST].max() <= 1.0
    assert batch[TOP].dtype == np.uint8 and batch[TOP].shape == (8, 60, 80, 3)  # not in keys
    for key in (TOP, WRIST):
        assert spec[key].shape == batch[key].shape and spec[key].dtype == batch[key].dtype


# -- CPU and device agree ------------------------------------------------------------------


def _difference(a, b):
    d = np.abs(np.asarray(a, np.int32) - np.asarray(b, np.int32))
    return float(d.mean()), float((d > 1).mean()), int(d.max())


@pytest.mark.parametrize(
    "steps",
    [
        [Resize((24, 32))],
        [Resize((120, 160))],
        [ResizeWithPad((40, 40))],
        [CenterCrop(30)],
        [RandomCrop((30, 50))],
        [RandomResizedCrop(28)],
        [RandomRotation(30)],
        [ColorJitter(0.4, 0.4, 0.4, 0.1)],
        AUGMENT,
    ],
    ids=lambda s: "+".join(type(x).__name__ for x in s),
)
def test_cpu_and_jax_implementations_agree_within_the_stated_tolerance(steps):
    import jax
    import jax.numpy as jnp

    frames, positions = _frames(16, (60, 80), seed=3)[:, None], np.arange(16)
    augment = ImageTransforms(steps)
    cpu = augment.apply({"c": frames}, positions, seed=0)["c"]
    params = {"c": augment.draw("c", positions, 0, frames.shape[1:])}
    device = np.asarray(jax.jit(augment.apply_jax)({"c": jnp.asarray(frames)}, params)["c"])
    assert device.shape == cpu.shape and device.dtype == cpu.dtype
    mean, share, largest = _difference(cpu, device)
    assert mean <= MEAN_TOLERANCE and share <= OFF_BY_MORE_THAN_ONE and largest <= MAX_TOLERANCE


DEVICE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    sys.path.insert(0, sys.argv[2])
    import jaxload
    from tests.transforms.test_compose import AUGMENT
    if __name__ == "__main__":
        mesh = jax.make_mesh((jax.device_count(),), ("data",))
        sharding = NamedSharding(mesh, P("data"))
        out = {}
        for name, kw in {
            "cpu": dict(image_transforms_on="cpu"),
            "device": dict(image_transforms_on="device"),
            "decode_on_device": dict(decode_device="device"),  # auto -> transforms on devices
        }.items():
            loader = jaxload.make_loader(sys.argv[1], global_batch_size=8, seed=5,
                                         options=jaxload.PipelineOptions(num_workers=0),
                                         sharding=sharding, image_transforms=AUGMENT, **kw)
            with loader:
                batches = [next(loader) for _ in range(3)]
            top = "observation.images.top"
            assert all(b[top].sharding.spec == P("data") for b in batches)
            out[name] = np.concatenate([np.asarray(b[top]) for b in batches]).tolist()
            out[name + "_on"] = loader.spec.placement.image_transforms_on
        print(json.dumps(out))
    """
)


@pytest.mark.processes
def test_loader_transforms_on_devices_match_the_cpu_path(dataset):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    run = subprocess.run(
        [sys.executable, "-c", DEVICE_SCRIPT, str(dataset), str(REPO)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert (got["cpu_on"], got["device_on"], got["decode_on_device_on"]) == (
        "cpu",
        "device",
        "device",
    )
    cpu = np.array(got["cpu"], np.uint8)
    assert cpu.shape == (24, 32, 40, 3)
    for name in ("device", "decode_on_device"):
        mean, share, largest = _difference(cpu, np.array(got[name]))
        assert mean <= MEAN_TOLERANCE and share <= OFF_BY_MORE_THAN_ONE, name
        assert largest <= MAX_TOLERANCE, name


# -- bad arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: Resize(224), ValueError, r"Resize: size must be \(height, width\)"),
        (lambda: RandomCrop((0, 10)), ValueError, "positive ints"),
        (lambda: RandomResizedCrop(32, scale=(0.5, 2.0)), ValueError, "scale must be"),
        (lambda: RandomResizedCrop(32, ratio=(2.0, 1.0)), ValueError, "ratio must be"),
        (lambda: RandomRotation(-5), ValueError, r"degrees must be a number v in \[0, 180\]"),
        (lambda: ColorJitter(hue=0.7), ValueError, "hue must be"),
        (lambda: ColorJitter(brightness="a lot"), ValueError, "brightness must be"),
        (lambda: ImageTransforms([Resize((8, 8)), "flip"]), TypeError, "step 1 is 'flip'"),
        (lambda: ImageTransforms(Resize((8, 8))), TypeError, "list of steps"),
        (lambda: ImageTransforms([], dtype="float16"), ValueError, "dtype must be one of"),
        (lambda: ImageTransforms([], keys="observation.images.top"), TypeError, "list of camera"),
    ],
)
def test_bad_transform_arguments_are_refused_clearly(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_bad_loader_arguments_name_the_camera_or_the_fix(dataset):
    with pytest.raises(
        ValueError, match=rf"camera '{WRIST}': CenterCrop\(50, 50\) is larger than the 48x64"
    ):
        _loader(dataset, image_transforms=[CenterCrop(50)])
    with pytest.raises(ValueError, match=r"keys \['observation.state'\] are not cameras"):
        _loader(dataset, image_transforms=ImageTransforms([], keys=["observation.state"]))
    with pytest.raises(ValueError, match=r"image_transforms_on=.device. .* pass `sharding`"):
        _loader(dataset, image_transforms=AUGMENT, image_transforms_on="device")
    with pytest.raises(ValueError, match="image_transforms_on='gpu'; choose one of"):
        _loader(dataset, image_transforms=AUGMENT, image_transforms_on="gpu")
    with pytest.raises(TypeError, match="image_transforms must be"):
        _loader(dataset, image_transforms="RandomResizedCrop")


def test_cpu_transforms_of_frames_decoded_on_the_devices_are_refused(dataset):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(jax.make_mesh((1,), ("data",)), PartitionSpec("data"))
    with pytest.raises(ValueError, match="the readers never hold their frames"):
        _loader(
            dataset,
            image_transforms=AUGMENT,
            image_transforms_on="cpu",
            decode_device="device",
            sharding=sharding,
        )
