"""make_loader on an in-memory stand-in dataset: order, hosts, state, workers, mixtures."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import grain
import jax
import numpy as np
import pytest

from jaxload import PipelineOptions, make_loader
from jaxload.errors import CheckpointError
from jaxload.sampling.permutation import EpochOrder
from tests.support.fake_dataset import FakeDataset, add_state_sum

REPO = Path(__file__).resolve().parents[2]
LENGTHS = [9, 1, 14, 4, 7, 17, 3]  # 55 frames, awkward sizes
WINDOW = {"action": [0.0, 0.1, 0.2], "observation.state": [-0.1, 0.0]}


def _fake(**kw):
    return FakeDataset(LENGTHS, delta_timestamps=WINDOW, **kw)


def _loader(ds=None, options=None, **kw):
    kw.setdefault("host_index", 0)
    kw.setdefault("host_count", 1)
    options = options or PipelineOptions(num_workers=0)
    return make_loader(ds if ds is not None else _fake(), options=options, **kw)


def _take(loader, n):
    return [next(loader) for _ in range(n)]


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert sorted(x) == sorted(y)
        for key in x:
            xa, ya = np.asarray(x[key]), np.asarray(y[key])
            assert xa.dtype == ya.dtype and xa.shape == ya.shape, key
            assert np.array_equal(xa, ya), key


def test_batch_has_every_key_with_a_batch_axis():
    loader = _loader(global_batch_size=5)
    batch = next(loader)
    assert {"index", "episode_index", "frame_index", "action_is_pad"} <= set(batch)
    # Host-only strings and a one-dataset dataset_index are left out by default.
    assert "task" not in batch and "dataset_index" not in batch
    assert batch["action"].shape == (5, 3, 4) and batch["action_is_pad"].shape == (5, 3)
    assert batch["observation.images.top"].dtype == np.uint8
    assert set(loader.element_spec) == set(batch)
    for key, spec in loader.element_spec.items():
        assert isinstance(spec, jax.ShapeDtypeStruct), key
        assert batch[key].shape == spec.shape and batch[key].dtype == spec.dtype, key
    # The sample behind each row is exactly what the dataset returns at that position;
    # "task" is there when asked for.
    with_task = next(_loader(global_batch_size=5, keys=["index", "action", "task"]))
    assert list(with_task) == ["index", "action", "task"]
    assert with_task["task"].dtype.kind == "U" and with_task["task"].shape == (5,)
    ds = _fake()
    for row, index in enumerate(batch["index"]):
        sample = ds[int(index)]
        assert np.array_equal(batch["action"][row], sample["action"])
        assert with_task["task"][row] == sample["task"]


@pytest.mark.parametrize("batch_size", [1, 7, 16])
def test_each_epoch_visits_every_anchor_once(batch_size):
    first, last = 1, 2
    loader = _loader(
        global_batch_size=batch_size,
        num_epochs=3,
        drop_n_first_frames=first,
        drop_n_last_frames=last,
        seed=3,
    )
    stream = np.concatenate([b["index"] for b in loader])
    anchors = [
        s + f
        for s, n in zip(np.cumsum([0, *LENGTHS[:-1]]), LENGTHS, strict=True)
        for f in range(first, n - last)
    ]
    n = len(anchors)
    assert loader.epoch_size == n and stream.size == (3 * n // batch_size) * batch_size
    for epoch in range(stream.size // n):
        assert sorted(stream[epoch * n : (epoch + 1) * n]) == anchors
    order = EpochOrder(LENGTHS, seed=3, drop_n_first_frames=first, drop_n_last_frames=last)
    assert np.array_equal(stream, order.positions(np.arange(stream.size)))
    with pytest.raises(StopIteration):
        next(loader)


def test_shuffle_false_is_source_order_and_seeds_differ():
    stream = np.concatenate(
        [b["index"] for b in _take(_loader(global_batch_size=11, shuffle=False), 5)]
    )
    assert stream.tolist() == list(range(55))
    a = np.concatenate([b["index"] for b in _take(_loader(global_batch_size=11, seed=0), 5)])
    b = np.concatenate([b["index"] for b in _take(_loader(global_batch_size=11, seed=1), 5)])
    assert sorted(a) == sorted(b) == list(range(55)) and not np.array_equal(a, b)


def _global_stream(host_count, num_batches, global_batch_size=24, ds=None, **kw):
    """Per global batch: the hosts' parts concatenated in host order, plus the parts."""
    loaders = [
        _loader(ds, global_batch_size=global_batch_size, host_index=h, host_count=host_count, **kw)
        for h in range(host_count)
    ]
    parts = [_take(loader, num_batches) for loader in loaders]
    merged = [
        {k: np.concatenate([parts[h][k_][k] for h in range(host_count)]) for k in parts[0][k_]}
        for k_ in range(num_batches)
    ]
    return merged, parts


def test_host_parts_tile_each_global_batch_for_any_host_count():
    ds = FakeDataset(
        [40, 33, 1, 90], delta_timestamps=WINDOW
    )  # 164 frames: no repeats in 6 batches
    reference, _ = _global_stream(1, 6, seed=5, ds=ds)
    for host_count in (2, 3, 4, 8):
        merged, parts = _global_stream(host_count, 6, seed=5, ds=ds)
        for k in range(6):
            sets = [set(parts[h][k]["index"].tolist()) for h in range(host_count)]
            assert all(len(parts[h][k]["index"]) == 24 // host_count for h in range(host_count))
            assert sum(len(s) for s in sets) == len(set().union(*sets)) == 24  # disjoint, exact
            assert set().union(*sets) == set(reference[k]["index"].tolist())
        assert_batches_equal(merged, reference)


def test_host_count_must_divide_the_global_batch():
    with pytest.raises(ValueError, match="not divisible by the host count 3"):
        _loader(global_batch_size=10, host_index=0, host_count=3)
    with pytest.raises(ValueError, match="host_index"):
        _loader(global_batch_size=10, host_index=2, host_count=2)


def test_get_state_set_state_is_exact_and_json():
    reference = _take(_loader(global_batch_size=6, seed=2), 20)
    for k in (0, 1, 9, 13):  # 9 and 13 straddle epoch boundaries (55 anchors)
        loader = _loader(global_batch_size=6, seed=2)
        _take(loader, k)
        state = json.loads(json.dumps(loader.get_state()))
        assert state["position"] == 6 * k and state["epoch"] == 6 * k // 55
        fresh = _loader(global_batch_size=6, seed=2)
        fresh.set_state(state)
        assert_batches_equal(_take(fresh, 20 - k), reference[k:])


def test_state_refuses_another_dataset_seed_or_sampling():
    state = _loader(global_batch_size=6).get_state()
    with pytest.raises(CheckpointError, match="another dataset"):
        _loader(FakeDataset([9, 1, 14]), global_batch_size=6).set_state(state)
    with pytest.raises(CheckpointError, match="seed=0 but this loader has seed=1"):
        _loader(global_batch_size=6, seed=1).set_state(state)
    with pytest.raises(CheckpointError, match="drop_n_last_frames"):
        _loader(global_batch_size=6, drop_n_last_frames=1).set_state(state)
    with pytest.raises(CheckpointError, match="not a jaxload loader state"):
        _loader(global_batch_size=6).set_state({"position": 3})


def test_global_batch_size_change_is_refused_or_explicit():
    loader = _loader(global_batch_size=6)
    _take(loader, 3)
    state = loader.get_state()
    other = _loader(global_batch_size=4)
    with pytest.raises(CheckpointError, match=r"global_batch_size=6 .* has 4"):
        other.set_state(state)
    with pytest.warns(UserWarning, match="continues at sample 18"):
        other.set_state(state, allow_global_batch_size_change=True)
    stream = _take(_loader(global_batch_size=1), 30)
    expected = np.concatenate([b["index"] for b in stream[18:26]])
    assert np.concatenate([b["index"] for b in _take(other, 2)]).tolist() == expected.tolist()


def test_grain_checkpoint_helper_on_the_loader_and_its_pipeline():
    # Grain's own check on our iterator (our state) and on the raw Grain pipeline (Grain's state).
    grain.experimental.assert_equal_output_after_checkpoint(
        _loader(global_batch_size=8, num_epochs=1, drop_n_last_frames=2)
    )
    pipeline = _loader(
        global_batch_size=8, num_epochs=1, options=PipelineOptions(num_workers=0, read_threads=2)
    ).grain_dataset()
    grain.experimental.assert_equal_output_after_checkpoint(pipeline)


def test_mixture_of_datasets_with_different_schemas():
    a = FakeDataset(LENGTHS, state_dim=4, salt="a")
    b = FakeDataset(
        [30, 20], state_dim=6, cameras={"observation.images.wrist": (4, 4, 3)}, salt="b"
    )
    loader = _loader([a, b], global_batch_size=100, weights=[0.7, 0.3], seed=1)
    batches = _take(loader, 10)
    ds_index = np.concatenate([x["dataset_index"] for x in batches])
    # Exact by construction: every block of 10 positions holds 7 of dataset 0.
    assert loader.stream.mixture.block_size == 10
    assert (ds_index == 0).sum() == 700
    batch = batches[0]
    from_a, from_b = batch["dataset_index"] == 0, batch["dataset_index"] == 1
    assert batch["observation.state"].shape == (100, 6)
    assert (
        batch["observation.state_dim_is_pad"][from_a].all(axis=0).tolist()
        == [False] * 4 + [True] * 2
    )
    assert batch["observation.images.top_is_pad"].tolist() == from_b.tolist()
    assert not batch["observation.images.wrist"][from_a].any()
    assert (batch["episode_index"][from_b] < 2).all()
    # Deterministic from the seed, and exactly resumable like a single dataset.
    again = _take(_loader([a, b], global_batch_size=100, weights=[0.7, 0.3], seed=1), 10)
    assert_batches_equal(again, batches)
    resumed = _loader([a, b], global_batch_size=100, weights=[0.7, 0.3], seed=1)
    resumed.set_state({**loader.get_state(), "position": 400})
    assert_batches_equal(_take(resumed, 6), batches[4:])


@pytest.mark.processes
def test_worker_processes_give_the_same_batches():
    # Real Grain worker processes with read threads, against the in-process read.
    reference = _take(_loader(global_batch_size=6, seed=7, batch_transform=add_state_sum), 7)
    assert np.allclose(reference[0]["state_sum"], reference[0]["observation.state"].sum(-1))
    kw = dict(options=PipelineOptions(num_workers=2, read_threads=2), batch_transform=add_state_sum)
    with _loader(global_batch_size=6, seed=7, **kw) as loader:
        got = _take(loader, 7)
        assert loader.get_state()["position"] == 42
    assert_batches_equal(got, reference)
    assert all(type(v) is np.ndarray for v in got[0].values())


SHARDED_SCRIPT = """
import numpy as np, jax
from jax.sharding import NamedSharding, PartitionSpec as P
from jaxload import PipelineOptions, make_loader
from tests.support.fake_dataset import FakeDataset, add_state_sum
from tests.pipeline.test_loader import LENGTHS, WINDOW

if __name__ == "__main__":
    assert jax.device_count() == 4
    ds = FakeDataset(LENGTHS, delta_timestamps=WINDOW)
    mesh = jax.make_mesh((4,), ("data",))
    loader = make_loader(ds, global_batch_size=8, seed=1,
                         options=PipelineOptions(num_workers=0),
                         sharding=NamedSharding(mesh, P("data")))
    plain = make_loader(ds, global_batch_size=8, seed=1, options=PipelineOptions(num_workers=0))
    for _ in range(3):
        got, want = next(loader), next(plain)
        for k, v in want.items():
            if k == "task":
                assert (got[k] == v).all()
                continue
            assert isinstance(got[k], jax.Array) and got[k].shape == v.shape, k
            assert got[k].sharding.spec[0] == "data" and len(got[k].addressable_shards) == 4
            assert np.array_equal(np.asarray(got[k]), v), k
    print("OK", loader.element_spec["action"])
"""


@pytest.mark.processes
def test_sharded_batches_are_global_jax_arrays():
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    out = subprocess.run(
        [sys.executable, "-c", SHARDED_SCRIPT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "OK ShapeDtypeStruct(shape=(8, 3, 4), dtype=float32)" in out.stdout


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="global_batch_size"):
        _loader(global_batch_size=0)
    with pytest.raises(ValueError, match="pass `sharding`"):
        _loader(global_batch_size=2, decode_device="cuda")
    with pytest.raises(ValueError, match="choose one of"):
        _loader(global_batch_size=2, decode_device="gpu")
    with pytest.raises(ValueError, match=r"hybrid' was removed: .* below either side alone"):
        _loader(global_batch_size=2, decode_device="hybrid")
    with pytest.raises(ValueError, match="2 weights for 1 datasets"):
        _loader(global_batch_size=2, weights=[1, 2])
    loader = _loader(global_batch_size=10, num_epochs=2)
    assert loader.num_batches == 11
    warnings.simplefilter("error")  # closing twice and iterating after StopIteration are quiet
    list(loader)
    loader.close()
    loader.close()


class _StubSharding:
    """Just enough of a NamedSharding for hosts.sharding_rows: two devices per process."""

    spec = ("data",)

    def __init__(self, slices):
        self._slices = slices

    def addressable_devices_indices_map(self, shape):
        return {f"dev{i}": (s,) for i, s in enumerate(self._slices)}


def test_rows_follow_the_devices_of_this_process():
    from jaxload.batch.hosts import sharding_rows

    # Non-contiguous rows (an interleaved mesh) and replicas (two devices, same rows).
    rows = sharding_rows(_StubSharding([slice(24, 28), slice(8, 12)]), 32)
    assert rows.tolist() == [*range(8, 12), *range(24, 28)]
    assert sharding_rows(_StubSharding([slice(0, 16), slice(0, 16)]), 32).tolist() == list(
        range(16)
    )


@pytest.mark.processes
def test_grain_checkpoint_helper_with_worker_processes():
    # Restarts the worker processes at every saved state: slow on 2 cores.
    loader = _loader(global_batch_size=16, num_epochs=1, options=PipelineOptions(num_workers=1))
    grain.experimental.assert_equal_output_after_checkpoint(loader)
    loader.close()


def test_default_parallelism_follows_the_core_count():
    from jaxload.options import split_cores

    # Up to 3 cores: threads in this process; then processes of ~3 cores each, at most 8.
    assert [split_cores(c) for c in (1, 2, 3)] == [(0, 2), (0, 2), (0, 3)]
    assert [split_cores(c) for c in (4, 6, 16)] == [(2, 2), (2, 3), (6, 3)]
    assert split_cores(96) == (8, 12)
    loader = make_loader(_fake(), global_batch_size=4, host_index=0, host_count=1)
    assert (loader.options.num_workers, loader.options.read_threads) == split_cores(os.cpu_count())
    explicit = make_loader(
        _fake(),
        global_batch_size=4,
        options=PipelineOptions(num_workers=2),
        host_index=0,
        host_count=1,
    )
    assert (explicit.options.num_workers, explicit.options.read_threads) == (2, 2)


def test_a_remote_dataset_gets_one_more_read_thread_unless_given():
    from jaxload.options import PipelineOptions

    def threads(**kwargs):
        return PipelineOptions(**kwargs).resolve(cores=2, remote=True).read_threads

    assert PipelineOptions().resolve(cores=2).read_threads == 2
    assert threads() == 3 and threads(num_workers=2) == 3
    assert threads(read_threads=2) == 2
