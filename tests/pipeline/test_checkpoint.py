"""Loader state inside real Orbax checkpoints: exact, elastic, and refusing the wrong dataset."""

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from jaxload import PipelineOptions, make_loader
from jaxload.checkpoint import STATE_FILE, LoaderRestore, LoaderSave
from jaxload.errors import CheckpointError
from tests.pipeline.test_loader import LENGTHS, WINDOW, assert_batches_equal
from tests.support.fake_dataset import FakeDataset


def _loader(ds=None, options=None, **kw):
    kw.setdefault("host_index", 0)
    kw.setdefault("host_count", 1)
    kw.setdefault("seed", 11)
    return make_loader(
        ds if ds is not None else FakeDataset(LENGTHS, delta_timestamps=WINDOW),
        options=options or PipelineOptions(num_workers=0),
        **kw,
    )


def _take(loader, n):
    return [next(loader) for _ in range(n)]


def _save(directory, step, loader, params=None):
    params = params if params is not None else {"w": jnp.arange(4.0)}
    with ocp.CheckpointManager(directory) as mngr:
        mngr.save(
            step,
            args=ocp.args.Composite(model=ocp.args.StandardSave(params), loader=LoaderSave(loader)),
        )
        mngr.wait_until_finished()


def _restore(directory, loader, **kw):
    with ocp.CheckpointManager(directory) as mngr:
        step = mngr.latest_step()
        abstract = {"w": jax_struct()}
        return mngr.restore(
            step,
            args=ocp.args.Composite(
                model=ocp.args.StandardRestore(abstract), loader=LoaderRestore(loader, **kw)
            ),
        )


def jax_struct():
    import jax

    return jax.ShapeDtypeStruct((4,), jnp.float32)


@pytest.mark.processes
def test_orbax_resume_is_exact_with_worker_processes(tmp_path):
    # Save at step k next to the model, restore into a fresh loader (new worker processes):
    # every following batch equals the uninterrupted run's, all keys, bitwise.
    k, more = 3, 5
    with _loader(global_batch_size=6, options=PipelineOptions(num_workers=1)) as loader:
        reference = _take(loader, k)
        _save(tmp_path / "ckpt", k, loader, {"w": jnp.arange(4.0) * k})
        reference += _take(loader, more)
    with _loader(global_batch_size=6, options=PipelineOptions(num_workers=1)) as fresh:
        restored = _restore(tmp_path / "ckpt", fresh)
        assert restored.loader is fresh and fresh.position == 6 * k
        assert np.array_equal(restored.model["w"], np.arange(4.0) * k)
        assert_batches_equal(_take(fresh, more), reference[k:])


def test_state_is_taken_when_save_is_called(tmp_path):
    # Orbax may finish the model asynchronously; the loader state is the one at mngr.save.
    loader = _loader(global_batch_size=6)
    _take(loader, 2)
    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
        mngr.save(
            2,
            args=ocp.args.Composite(
                model=ocp.args.StandardSave({"w": jnp.zeros(4)}), loader=LoaderSave(loader)
            ),
        )
        _take(loader, 3)  # the trainer moves on while the save completes
        mngr.wait_until_finished()
        state = mngr.restore(2, args=ocp.args.Composite(loader=LoaderRestore()))["loader"]
    assert state["position"] == 12 and state["global_batch_size"] == 6
    assert (tmp_path / "ckpt" / "2" / "loader" / STATE_FILE).is_file()


def _global_batches(loaders, n):
    """n global batches from simulated hosts: their parts concatenated in host order."""
    parts = [_take(loader, n) for loader in loaders]
    return [
        {key: np.concatenate([p[i][key] for p in parts]) for key in parts[0][i]} for i in range(n)
    ]


def _hosts(count, **kw):
    return [
        _loader(global_batch_size=12, host_index=h, host_count=count, **kw) for h in range(count)
    ]


@pytest.mark.parametrize(
    ("saved_hosts", "restored_hosts", "workers"),
    [(4, 2, 0), pytest.param(2, 3, 1, marks=pytest.mark.processes)],
    ids=["4to2", "2to3-workers"],
)
def test_elastic_restore_continues_the_global_stream(
    tmp_path, saved_hosts, restored_hosts, workers
):
    k, more = 4, 6
    reference = _global_batches(_hosts(1), k + more)
    before = _hosts(saved_hosts)
    assert_batches_equal(_global_batches(before, k), reference[:k])
    states = [h.get_state() for h in before]
    assert all(s == states[0] for s in states)  # the state is global: any host's copy will do
    assert states[0]["host_count"] == saved_hosts
    _save(tmp_path / "ckpt", k, before[0])
    after = _hosts(restored_hosts, options=PipelineOptions(num_workers=workers))
    for host in after:  # every process restores from the same loader_state.json
        _restore(tmp_path / "ckpt", host).loader.start()
    assert_batches_equal(_global_batches(after, more), reference[k:])
    for host in after:
        host.close()


def test_checkpoint_from_another_dataset_is_refused(tmp_path):
    loader = _loader(global_batch_size=6)
    _take(loader, 2)
    _save(tmp_path / "ckpt", 2, loader)
    other = _loader(
        FakeDataset([9, 1, 14, 4, 7, 17, 4], delta_timestamps=WINDOW), global_batch_size=6
    )
    with pytest.raises(CheckpointError, match=r"does not match dataset 0 .*content changed"):
        _restore(tmp_path / "ckpt", other)
    assert other.position == 0  # untouched


def test_batch_size_change_needs_an_explicit_opt_in(tmp_path):
    loader = _loader(global_batch_size=6)
    _take(loader, 2)
    _save(tmp_path / "ckpt", 2, loader)
    with pytest.raises(CheckpointError, match="allow_global_batch_size_change=True"):
        _restore(tmp_path / "ckpt", _loader(global_batch_size=4))
    bigger = _loader(global_batch_size=4)
    with pytest.warns(UserWarning, match="global_batch_size=6 into global_batch_size=4"):
        _restore(tmp_path / "ckpt", bigger, allow_global_batch_size_change=True)
    assert bigger.position == 12
    ones = _take(_loader(global_batch_size=1), 16)
    assert next(bigger)["index"].tolist() == [int(b["index"][0]) for b in ones[12:16]]


@pytest.mark.processes  # Orbax's checkpoint manager
def test_a_damaged_loader_state_is_a_checkpoint_error_naming_the_file(tmp_path):
    """A loader_state.json cut short (a crash mid-write on a file system without atomic
    rename) was a raw JSONDecodeError; a position of 24.7 or True was accepted."""
    import json

    loader = _loader(global_batch_size=6)
    _take(loader, 2)
    _save(tmp_path / "ckpt", 2, loader)
    path = tmp_path / "ckpt" / "2" / "loader" / STATE_FILE
    saved = path.read_text()
    path.write_text(saved[: len(saved) // 2])
    with pytest.raises(CheckpointError, match=rf"{STATE_FILE}: not valid JSON"):
        _restore(tmp_path / "ckpt", loader)
    for position in (24.7, True, -6, "12"):
        path.write_text(json.dumps(json.loads(saved) | {"position": position}))
        with pytest.raises(CheckpointError, match=rf"position={position!r}: not an integer"):
            _restore(tmp_path / "ckpt", loader)
    with pytest.raises(CheckpointError, match="global_batch_size=0"):
        loader.set_state(loader.get_state() | {"global_batch_size": 0})
    assert loader.position == 12  # untouched by the refusals


def test_a_refused_restore_names_what_changed():
    from jaxload.state import LoaderState, check_compatible

    view = {"content": "c" * 64, "episodes": "e1", "num_episodes": 4, "windows": {"action": [0, 1]}}

    def state(fingerprint, **changes):
        return LoaderState(
            position=8, epoch=0, seed=0, global_batch_size=4, host_count=1,
            fingerprint=fingerprint, dataset_fingerprints=("v",), shuffle=True,
            drop_n_first_frames=0, drop_n_last_frames=0, mixture_quota=(), epoch_size=20,
            sources=("out/a",), views=({**view, **changes},),
        )  # fmt: skip

    saved = state("old")
    cases = {
        "content": (state("new", content="d" * 64), r"dataset 0 \(out/a\): its content changed"),
        "episodes": (state("new", episodes="e2", num_episodes=3), r"episode selection changed \(4 episodes saved, 3 now"),
        "windows": (
            state("new", windows={"action": [0, 1, 2, 3, 4, 5]}),
            r"its windows changed \('action': frames \[0, 1\] saved, 0..5 now\)",
        ),
    }  # fmt: skip
    for _name, (current, message) in cases.items():
        with pytest.raises(CheckpointError, match=message):
            check_compatible(saved, current)
    legacy = {k: v for k, v in saved.to_dict().items() if k != "views"}  # saved before views
    assert LoaderState.from_dict(legacy).views == ()
    with pytest.raises(CheckpointError, match="is from another dataset"):
        check_compatible(LoaderState.from_dict(legacy), state("new", content="d"))


def test_a_state_with_a_null_fingerprint_or_a_huge_position_is_a_clear_checkpoint_error():
    """Issue #44: `fingerprint: null` was refused by a CheckpointError naming the same
    fingerprints as saved and as now; `position=10**30` was a raw OverflowError."""
    loader = _loader(global_batch_size=6)
    _take(loader, 2)
    state = loader.get_state()
    with pytest.raises(CheckpointError, match=r"fingerprint=None, .*the state is damaged"):
        loader.set_state(state | {"fingerprint": None})
    with pytest.raises(CheckpointError, match=r"dataset_fingerprints=\[None\].*damaged"):
        loader.set_state(state | {"dataset_fingerprints": [None]})
    for name in ("position", "epoch", "seed", "epoch_size"):
        with pytest.raises(CheckpointError, match=rf"{name}={10**30}: larger than any stream"):
            loader.set_state(state | {name: 10**30})
    # a stream fingerprint edited alone: said so, not "another dataset" with the same names
    with pytest.raises(CheckpointError, match=r"stream fingerprint 0000.* edited or damaged"):
        loader.set_state(state | {"fingerprint": "0" * 64})
    assert loader.position == 12
    loader.set_state(state)
    assert loader.position == 12
