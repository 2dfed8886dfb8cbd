"""Nonsense arguments and broken batch transforms fail at once, naming the argument and the
rule (never a wrong stream, a silent empty loader, or a next() that spins forever)."""

import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import jaxload
from jaxload import PipelineOptions, make_loader
from jaxload.converters.convert import convert
from jaxload.errors import BatchTransformError, WindowError
from jaxload.windows import resolve_delta_timestamps
from jaxload.workers import processes as workers
from tests.support import fault_helpers
from tests.support.lerobot_factory import write_lerobot_v3

LENGTHS = (5, 6, 7, 8)  # 26 frames


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("arguments")
    src = write_lerobot_v3(root / "src", episode_lengths=LENGTHS, cameras={})
    convert(src, root / "out", workers=1, progress=False)
    return root / "out"


def _loader(path, num_workers=0, **kw):
    kw = {"global_batch_size": 4, "host_index": 0, "host_count": 1, **kw}
    return make_loader(path, options=PipelineOptions(num_workers=num_workers), **kw)


@pytest.mark.parametrize(
    "argument, value, rule",
    [
        ("seed", 1.5, "seed must be an integer >= 0 and < 2\\*\\*64, got 1.5"),
        ("seed", -1, "seed must be an integer >= 0 and < 2\\*\\*64, got -1"),
        ("seed", 2**64, "seed must be an integer >= 0 and < 2\\*\\*64"),
        ("seed", True, "seed must be an integer"),
        ("global_batch_size", 2.5, "global_batch_size must be an integer >= 1, got 2.5"),
        ("global_batch_size", 0, "global_batch_size must be an integer >= 1, got 0"),
        ("num_epochs", 1.5, "num_epochs must be an integer >= 1"),
        ("drop_n_first_frames", -1, "drop_n_first_frames must be an integer >= 0"),
        ("drop_n_last_frames", 0.5, "drop_n_last_frames must be an integer >= 0"),
        ("mixture_block_size", 0, "mixture_block_size must be an integer >= 1"),
        ("num_workers", -1, "num_workers must be an integer >= 0"),
        ("host_count", 1.0, "host_count must be an integer >= 1"),
        ("batch_transform", "add", "batch_transform must be a callable"),
    ],
)
def test_nonsense_arguments_name_the_argument_and_the_rule(dataset, argument, value, rule):
    with pytest.raises(ValueError, match=rule):
        _loader(dataset, **{argument: value})


def test_the_largest_seed_is_its_own_stream(dataset):
    # 2**64 - 1 is a valid seed, not an alias of -1 or of another seed.
    first = [next(_loader(dataset, seed=s))["index"].tolist() for s in (0, 1, 2**64 - 1)]
    assert len({tuple(f) for f in first}) == 3


def test_a_global_batch_larger_than_the_finite_stream_is_an_error(dataset):
    with pytest.raises(ValueError, match=r"global_batch_size 32 is larger than the 26 samples"):
        _loader(dataset, global_batch_size=32, num_epochs=1)
    assert _loader(dataset, global_batch_size=26, num_epochs=1).num_batches == 1
    assert _loader(dataset, global_batch_size=32, num_epochs=2).num_batches == 1


def test_an_empty_episode_selection_says_so(dataset):
    # It used to blame drop_n_first_frames.
    with pytest.raises(ValueError, match=r"episodes is empty, so there is nothing to read"):
        _loader(dataset, episodes=[])
    with pytest.raises(ValueError, match=r"episodes is empty"):
        _loader([jaxload.DatasetSource(dataset, episodes=np.array([], int))])


def test_weights_must_be_finite_and_non_negative(dataset):
    for weight in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="weight must be a finite number >= 0"):
            _loader(dataset, weights=[weight])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_delta_timestamps_must_be_finite(dataset, bad):
    # NaN passed the multiple-of-1/fps test and became a padded slot holding frame 0.
    with pytest.raises(WindowError, match=r"delta_timestamps\['action'\]: \[.*\] are not finite"):
        resolve_delta_timestamps({"action": [0.0, bad]}, fps=10, valid_keys=["action"])
    with pytest.raises(WindowError, match="not finite"):
        _loader(dataset, delta_timestamps={"action": [bad]})


@pytest.mark.parametrize("value", [0, -1.0, math.nan, "300", True])
def test_worker_timeout_must_be_positive_seconds(value):
    with pytest.raises(ValueError, match="worker_timeout_s must be a number of seconds > 0"):
        PipelineOptions(worker_timeout_s=value)


@pytest.mark.parametrize(
    "transform, message",
    [
        (fault_helpers.returns_none, r"returns_none returned NoneType; it must return the batch"),
        (fault_helpers.drops_rows, r"drops_rows returned '\w+' as shape \(1,.*host's 4 rows"),
        (fault_helpers.returns_a_list, r"returns_a_list returned 'index' as list"),
    ],
)
def test_a_batch_transform_must_return_a_batch(dataset, transform, message):
    # Returning None made next() spin at 100% CPU (Grain drops None as filtered out).
    loader = _loader(dataset, batch_transform=transform, num_epochs=1)
    with pytest.raises(BatchTransformError, match=message):
        next(loader)
    loader.close()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.processes
def test_reclaim_removes_only_dead_loaders_leftovers(tmp_path, monkeypatch):
    # Real files, a real dead process and a real mapping, in a directory standing in for
    # /dev/shm (the rules do not depend on the file system).
    import mmap

    monkeypatch.setenv("JAXLOAD_RECLAIM_SHM", "1")
    dead, old = _dead_pid(), time.time() - 60
    names = {
        "dead": f"jaxload_{dead}_0123abcd",
        "alive": f"jaxload_{os.getpid()}_0123abcd",
        "orphan_semaphore": "sem.mp-orphan1x",
        "young_semaphore": "sem.mp-young2xy",
        "mapped_semaphore": "sem.mp-mapped3z",
        "other": f"psm_{dead}_0123abcd",
        "another_users": f"jaxload_{dead}_4567abcd",
    }
    for key, name in names.items():
        (tmp_path / name).write_bytes(b"\0" * 4096)
        if key != "young_semaphore":
            os.utime(tmp_path / name, (old, old))
    if os.geteuid() == 0:
        os.chown(tmp_path / names["another_users"], 12345, 12345)
    else:
        del names["another_users"]
    with open(tmp_path / names["mapped_semaphore"], "r+b") as f:
        mapping = mmap.mmap(f.fileno(), 0)  # a live semaphore is mapped by its users

    monkeypatch.setenv("JAXLOAD_RECLAIM_SHM", "0")
    assert workers.reclaim_shared_memory(str(tmp_path)) == []
    monkeypatch.setenv("JAXLOAD_RECLAIM_SHM", "1")
    try:
        removed = workers.reclaim_shared_memory(str(tmp_path))
    finally:
        mapping.close()
    assert sorted(removed) == sorted([names["dead"], names["orphan_semaphore"]])
    kept = {"alive", "young_semaphore", "mapped_semaphore", "other", "another_users"}
    assert sorted(os.listdir(tmp_path)) == sorted(v for k, v in names.items() if k in kept)


def test_batches_that_cannot_fit_in_memory_are_refused_with_the_estimate():
    """global_batch_size=10**8 ran to 22 GB and the OOM killer; now make_loader refuses,
    saying how much the batches in flight would take and what is available."""
    import dataclasses

    from jaxload.resolution.arguments import check_fits_in_memory
    from tests.support.fake_dataset import FakeDataset

    loader = make_loader(
        FakeDataset([50, 70]),
        global_batch_size=8,
        host_index=0,
        host_count=1,
        options=PipelineOptions(num_workers=0, read_threads=2, prefetch=2),
    )
    spec = loader.spec
    row = sum(math.prod(s) * np.dtype(d).itemsize for s, d in spec.schema.element_spec.values())
    in_flight = 2 * 2 + 2 + 2 + 1  # read threads' buffers, the worker buffer, prefetch, in use
    check_fits_in_memory(spec, available=8 * row * in_flight)  # exactly fits
    huge = dataclasses.replace(spec, rows=np.arange(10**6), global_batch_size=10**6)
    with pytest.raises(ValueError, match=r"global_batch_size=1000000: .* GiB available"):
        check_fits_in_memory(huge, available=8 * row * in_flight)
    loader.close()


def test_numpy_integers_are_integers_everywhere_and_episodes_are_lists():
    """num_workers=np.int64(0) was refused while seed took numpy integers; episodes=5 and
    episodes=[0.5] were raw TypeErrors."""
    from tests.support.fake_dataset import FakeDataset

    options = PipelineOptions(num_workers=np.int64(0), prefetch=np.int32(2))
    assert type(options.num_workers) is int and options.prefetch == 2
    kw = dict(global_batch_size=2, host_index=0, host_count=1, options=options)
    loader = make_loader(FakeDataset([5, 7]), seed=np.uint64(3), **kw)
    assert next(loader)["index"].shape == (2,)
    for bad, said in (
        (5, r"episodes: a list of episode indices .* not 5; one episode is episodes=\[5\]"),
        ([0.5], r"episodes: episode indices must be integers, got 0\.5"),
        ([[0, 0.5]], r"episodes\[0\]: episode indices must be integers, got 0\.5"),
    ):
        with pytest.raises(ValueError, match=said):
            make_loader(FakeDataset([5, 7]), episodes=bad, **kw)
