"""make_loader on real converted LeRobot fixtures (tabular_only, h264_single) with worker processes."""

import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp
import pytest

import jaxload
from jaxload import PipelineOptions, make_loader
from jaxload.batch.schema import BatchSchema
from jaxload.checkpoint import LoaderRestore, LoaderSave
from jaxload.converters.convert import convert
from jaxload.errors import CheckpointError, WindowError
from jaxload.sampling.stream import SampleStream
from jaxload.workers import shared_batch
from tests.pipeline.test_loader import assert_batches_equal

pytestmark = pytest.mark.integration

WINDOW = {
    "action": [0.0, 0.1, 0.2],
    "observation.image": [-0.1, 0.0],
    "observation.state": [-0.1, 0.0],
}


@pytest.fixture(scope="session")
def converted(shared_lerobot, tmp_path_factory):
    root = tmp_path_factory.mktemp("converted")
    for name in ("tabular_only", "h264_single"):
        convert(shared_lerobot / name, root / name, workers=1, progress=False)
    return root


def _check_identity(batch):
    """The fixtures encode their own position: state[0] = episode * 10000 + frame."""
    anchor = batch["observation.state"][:, -1, 0] if batch["observation.state"].ndim == 3 else None
    expected = batch["episode_index"] * 10000 + batch["frame_index"]
    assert np.array_equal(
        anchor if anchor is not None else batch["observation.state"][:, 0], expected
    )


@pytest.mark.processes
def test_video_dataset_with_workers_matches_direct_reads_and_resumes(converted, tmp_path):
    path = converted / "h264_single"
    kw = dict(global_batch_size=8, seed=3, delta_timestamps=WINDOW, drop_n_last_frames=2)
    kw.update(host_index=0, host_count=1)
    with make_loader(path, options=PipelineOptions(num_workers=2, read_threads=2), **kw) as loader:
        batches = [next(loader) for _ in range(4)]
        with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
            mngr.save(4, args=ocp.args.Composite(loader=LoaderSave(loader)))
        batches += [next(loader) for _ in range(4)]

    # The same batches computed by hand: stream positions -> ds.__getitems__ -> collate,
    # less what a one-dataset batch leaves out ("task", "dataset_index").
    ds = jaxload.open(path, delta_timestamps=WINDOW)
    stream = SampleStream([ds.episode_lengths], seed=3, drop_n_last_frames=2)
    schema = BatchSchema([ds.element_spec()])
    for k, batch in enumerate(batches):
        ids, positions = stream.locate(np.arange(8 * k, 8 * (k + 1)))
        expected = schema.collate(ds.__getitems__(positions.tolist()), ids)
        del expected["task"], expected["dataset_index"]
        assert_batches_equal([batch], [expected])
        _check_identity(batch)
        assert batch["observation.image"].shape == (8, 2, 84, 84, 3)
        frame = batch["frame_index"]
        ends = ds.episode_lengths[np.searchsorted(ds.episode_index, batch["episode_index"])]
        assert (frame < ends - 2).all()  # drop_n_last_frames

    fresh = make_loader(path, options=PipelineOptions(num_workers=0), **kw)
    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
        mngr.restore(4, args=ocp.args.Composite(loader=LoaderRestore(fresh)))
    assert_batches_equal([next(fresh) for _ in range(4)], batches[4:])

    other = make_loader(
        converted / "tabular_only",
        options=PipelineOptions(num_workers=0),
        **{**kw, "delta_timestamps": None},
    )
    with (
        ocp.CheckpointManager(tmp_path / "ckpt") as mngr,
        pytest.raises(CheckpointError, match="another dataset"),
    ):
        mngr.restore(4, args=ocp.args.Composite(loader=LoaderRestore(other)))


def _shm_segments() -> set[str]:
    """This process's workers' slots (other processes may share /dev/shm)."""
    prefix = shared_batch.segment_prefix()
    return {name for name in os.listdir(shared_batch.SHM_DIR) if name.startswith(prefix)}


def _within(seconds: float, condition) -> bool:
    """Whether `condition()` becomes true within `seconds` (polled)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.processes
def test_closing_a_loader_leaves_no_shared_memory_behind(converted):
    # Workers decode into reused shared-memory slots; slots of batches they built but never
    # sent must not stay in /dev/shm after close (jaxload.workers.shared_batch unlinks them when a
    # worker exits, even those a read thread makes while it exits). Batches the trainer
    # still holds stay valid.
    gc.collect()  # loaders earlier tests dropped close now, not while this test counts
    time.sleep(1)
    before = _shm_segments()
    kw = dict(global_batch_size=8, delta_timestamps=WINDOW, host_index=0, host_count=1)
    for _ in range(2):
        loader = make_loader(
            converted / "h264_single",
            options=PipelineOptions(num_workers=2, read_threads=2),
            **kw,
        )
        held = next(loader)
        [next(loader) for _ in range(3)]
        # Workers fill their buffers with batches read ahead, in slots not yet opened here.
        assert _within(30, lambda: _shm_segments() - before)
        loader.close()
        _check_identity(held)
        assert held["observation.image"].any()
        del held, loader
    assert _within(30, lambda: not _shm_segments() - before)  # workers exit on their own time


@pytest.mark.processes
def test_mixture_of_tabular_and_video_datasets(converted):
    paths = [converted / "tabular_only", converted / "h264_single"]
    loader = make_loader(
        paths,
        global_batch_size=50,
        weights=[0.6, 0.4],
        delta_timestamps={"action": [0.0, 0.1]},  # multiples of 1/50 s and of 1/10 s
        options=PipelineOptions(num_workers=1),
        host_index=0,
        host_count=1,
    )
    with loader:
        batches = [next(loader) for _ in range(4)]
    for batch in batches:
        from_video = batch["dataset_index"] == 1
        assert from_video.sum() == 20  # 0.6/0.4 exactly per block of 5
        assert batch["observation.state"].shape == (50, 14)
        assert (
            batch["observation.state_dim_is_pad"][from_video].all(axis=0).tolist()
            == [False] * 4 + [True] * 10
        )
        assert batch["observation.image_is_pad"].tolist() == (~from_video).tolist()
        assert not batch["observation.image"][~from_video].any()
        assert batch["observation.image"][from_video].any()
        assert batch["action"].shape == (50, 2, 14) and batch["action_is_pad"].shape == (50, 2)
        _check_identity(batch)


def test_shared_windows_must_name_a_key_some_dataset_has(converted):
    paths = [converted / "tabular_only", converted / "h264_single"]
    with pytest.raises(WindowError, match=r"\['actoin'\] are in none of the datasets"):
        make_loader(paths, global_batch_size=4, delta_timestamps={"actoin": [0.0]})


def test_episode_selection_passes_through(converted):
    loader = make_loader(
        converted / "h264_single",
        global_batch_size=10,
        episodes=[1, 4],
        options=PipelineOptions(num_workers=0),
        num_epochs=1,
    )
    episodes = np.concatenate([b["episode_index"] for b in loader])
    assert set(episodes.tolist()) == {1, 4}


@pytest.mark.processes
def test_decoding_on_the_devices_equals_decoding_in_the_workers(converted):
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.decode_device_script",
            str(converted / "h264_single"),
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-4000:]


def test_autotune_fills_in_the_knobs_left_unset(converted):
    loader = make_loader(
        converted / "h264_single",
        global_batch_size=8,
        options=PipelineOptions(autotune=True, num_workers=0, prefetch=3),
    )
    assert loader.options.num_workers == 0 and loader.options.prefetch == 3  # kept
    assert loader.options.read_threads >= 1 and loader.options.decode_device == "cpu"
    assert next(loader)["index"].shape == (8,)
