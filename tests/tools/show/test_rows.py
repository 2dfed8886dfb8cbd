"""What a sheet's rows hold (jaxload.tools.show.rows): cameras and vector keys found by shape,
padded slots and missing cameras told apart, frames as uint8, who each sample is, and a
global jax.Array brought to the host as this process's rows."""

from __future__ import annotations

import numpy as np
import pytest

from jaxload.tools.show import rows, show
from tests.tools.show.sheets import mixture_batch, png


def test_global_jax_arrays_draw_the_same_sheet_as_numpy(tmp_path):
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    batch = mixture_batch(rows=4)
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    placed = {
        k: v if v.dtype.kind == "U" else jax.device_put(v, NamedSharding(mesh, P("data")))
        for k, v in batch.items()
    }
    assert isinstance(placed["action"], jax.Array)
    show(batch, tmp_path / "numpy.png")
    show(placed, tmp_path / "jax.png")
    assert np.array_equal(png(tmp_path / "numpy.png"), png(tmp_path / "jax.png"))


def test_a_multi_host_array_gives_this_process_rows():
    """A global jax.Array of several processes cannot be made in one; this stands in for
    one (jax's own shards of a real array, reported as not fully addressable) and checks
    that its addressable rows come in order, replicas once."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxload.tools.show.rows import host_rows

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    x = np.arange(8 * 3).reshape(8, 3)
    array = jax.device_put(x, NamedSharding(mesh, P("data")))

    class Partial:
        is_fully_addressable = False
        addressable_shards = list(reversed(array.addressable_shards)) * 2  # order, replicas

    assert np.array_equal(host_rows(Partial()), x)


CAM = "observation.images.top"


def test_cameras_and_vectors_are_found_by_shape_and_kind():
    b = 2
    batch = {
        CAM: np.zeros((b, 3, 16, 16, 3), np.uint8),  # a window of frames
        "observation.images.depth": np.zeros((b, 16, 16, 1), np.float32),  # one grey frame
        f"{CAM}_is_pad": np.zeros((b, 3), bool),
        "observation.state": np.zeros((b, 6), np.float32),
        "action": np.zeros((b, 8, 4), np.float32),  # (B, T, D) with D = 4 is no image
        "points": np.zeros((b, 5, 4, 3), np.float32),  # (B, T, 4, 3): too small to be one
        "zeta": np.zeros((b, 2), np.float64),
        "action_is_pad": np.zeros((b, 8), bool),
        "counts": np.zeros((b, 3), np.int64),  # integers: no line plot
        "timestamp": np.zeros((b,), np.float32),
        "task_index": np.zeros((b, 1), np.float32),  # who the sample is, never plotted
        "task": np.array(["a", "b"]),
    }
    cameras = rows.camera_keys(batch)
    assert cameras == [CAM, "observation.images.depth"]
    assert rows.series_keys(batch, cameras) == ["action", "observation.state", "zeta"]


def test_padded_slots_a_missing_camera_and_an_unwindowed_mask():
    frames = np.random.default_rng(0).integers(1, 255, (3, 2, 8, 8, 3), dtype=np.uint8)
    frames[2] = 0
    batch = {
        CAM: frames,
        f"{CAM}_is_pad": np.array([[True, False], [True, True], [True, True]]),
        "observation.images.wrist": np.ones((3, 8, 8, 3), np.uint8),  # unwindowed
        "observation.images.wrist_is_pad": np.array([False, True, False]),  # (B,)
    }
    got = rows.sample_rows(batch, rows.Context())
    top = [r.cameras[0] for r in got]
    assert [c.is_pad.tolist() for c in top] == [[True, False], [True, True], [True, True]]
    # every slot padded with real pixels: clamped copies of a real frame; zeros: missing
    assert [c.missing for c in top] == [False, False, True]
    wrist = [r.cameras[1] for r in got]
    assert all(c.frames.shape == (1, 8, 8, 3) for c in wrist)
    assert [c.is_pad.tolist() for c in wrist] == [[False], [True], [False]]
    assert not any(c.missing for c in wrist)  # padded, but its pixels are there


def test_float_frames_come_as_uint8_from_zero_one_or_scaled_from_their_range():
    unit = np.array([0.0, 0.5, 1.0], np.float32).reshape(1, 1, 3, 1, 1).repeat(3, axis=-1)
    normalized = np.array([-2.0, 0.0, 2.0], np.float32).reshape(1, 1, 3, 1, 1).repeat(3, axis=-1)
    centred = normalized / 4  # -0.5 .. 0.5: below zero, so normalized too
    for frames, want in (
        (unit, [0, 128, 255]),
        (normalized, [0, 128, 255]),
        (centred, [0, 128, 255]),
    ):
        frames = np.tile(frames, (1, 1, 1, 8, 1))  # (1, 1, 3, 8, 3): rows of 8 pixels
        (row,) = rows.sample_rows({CAM: frames}, rows.Context())
        got = row.cameras[0].frames
        assert got.dtype == np.uint8 and got[0, :, 0, 0].tolist() == want


def test_vector_windows_keep_their_padded_steps_and_dims():
    batch = {
        "action": np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3),
        "action_is_pad": np.array([[False, False, True, True], [False] * 4]),
        "action_dim_is_pad": np.array([[False, False, True], [False, False, False]]),
        "observation.state": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),  # (B, D)
    }
    first, second = rows.sample_rows(batch, rows.Context())
    action, state = first.series
    assert action.key == "action" and action.values.shape == (4, 3)
    assert action.step_is_pad.tolist() == [False, False, True, True]
    assert action.dim_is_pad.tolist() == [False, False, True]
    assert second.series[0].step_is_pad.tolist() == [False] * 4
    assert state.values.tolist() == [[1.0, 2.0]] and state.step_is_pad.tolist() == [False]
    assert state.scale == "(dataset stats: pass the loader, not a batch)"


class Described:
    """What a dataset tells about itself that a sheet shows (stands in for an opened
    dataset's metadata: its fps, tasks, stats and windows in frames)."""

    def __init__(self):
        self.fps = 15
        self.tasks = {0: "pick", 3: "place"}
        self.stats = {"action": {"min": [-1.5, 0.0], "max": [0.5, 2.25]}, "observation.state": {}}
        # a wrist window of 2 here, 3 slots in the batch: another camera renamed to it
        self.window_frames = {CAM: [-2, 0], "observation.images.wrist": [-1, 0]}


def test_a_loaders_context_names_each_row():
    batch = {
        CAM: np.ones((3, 2, 8, 8, 3), np.uint8),
        "observation.images.wrist": np.ones((3, 3, 8, 8, 3), np.uint8),
        "action": np.zeros((3, 3, 2), np.float32),
        "observation.state": np.zeros((3, 2), np.float32),
        "dataset_index": np.array([0, 1, 0]),
        "episode_index": np.array([4, 5, 6]),
        "frame_index": np.array([0, 9, 2]),
        "task_index": np.array([3, 0, 7]),
    }
    context = rows.Context(names=("/data/one", "/data/two"), datasets=(Described(), None),
                           positions=(40, 41, 42))  # fmt: skip
    got = rows.sample_rows(batch, context, samples=5)
    assert len(got) == 3  # no more rows than the batch has
    first, second, third = got
    assert (first.dataset, first.episode, first.frame, first.position) == ("/data/one", 4, 0, 40)
    assert (second.dataset, second.dataset_index, second.fps) == ("/data/two", 1, None)
    assert first.fps == 15 and first.task == "place" and third.task == ""  # task 7: unknown
    assert first.cameras[0].offsets == (-2, 0) and second.cameras[0].offsets is None
    assert first.cameras[1].offsets is None  # window lengths disagree: no labels
    action, state = first.series
    assert action.scale == "dataset's stats: -1.5 .. 2.25" and state.scale == ""
    assert second.series[0].scale == "(dataset stats: pass the loader, not a batch)"
    named = rows.sample_rows({**batch, "task": np.array(["x", "y", "z"])}, context)
    assert [r.task for r in named] == ["x", "y", "z"]  # the batch's own text first


def test_an_empty_batch_or_no_samples_is_refused():
    with pytest.raises(ValueError, match="the batch is empty"):
        rows.sample_rows({}, rows.Context())
    with pytest.raises(ValueError, match="samples must be at least 1, got 0"):
        rows.sample_rows({"action": np.zeros((2, 3))}, rows.Context(), samples=0)


def test_host_rows_of_numpy_and_of_a_fully_addressable_jax_array():
    import jax.numpy as jnp

    x = np.arange(6).reshape(3, 2)
    assert rows.host_rows(x) is x
    got = rows.host_rows(jnp.asarray(x))
    assert isinstance(got, np.ndarray) and np.array_equal(got, x)
