"""Nonsense arguments and broken batch transforms fail at once, naming the argument and the
rule (never a wrong stream, a silent empty loader, or a next() that spins forever)."""

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import jaxload
from jaxload import PipelineOptions, make_loader
from jaxload.errors import BatchTransformError, WindowError
from jaxload.windows import resolve_delta_timestamps
from jaxload.workers import processes as workers
from tests.support import fault_helpers
from tests.support.helpers import converted
from tests.support.lerobot_factory import write_lerobot_v3

LENGTHS = (5, 6, 7, 8)  # 26 frames


def tabular_dataset(tmp_path_factory) -> Path:
    """LENGTHS' episodes without cameras, converted once per session (tests/resolution/
    test_arguments.py reads the same one)."""
    src = tmp_path_factory.getbasetemp() / "sources" / "make-loader-tabular"
    if not src.exists():
        write_lerobot_v3(src, episode_lengths=LENGTHS, cameras={})
    return converted(tmp_path_factory, src)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return tabular_dataset(tmp_path_factory)


def _loader(path, num_workers=0, **kw):
    kw = {"global_batch_size": 4, "host_index": 0, "host_count": 1, **kw}
    return make_loader(path, options=PipelineOptions(num_workers=num_workers), **kw)


def test_the_largest_seed_is_its_own_stream(dataset):
    # 2**64 - 1 is a valid seed, not an alias of -1 or of another seed.
    first = [next(_loader(dataset, seed=s))["index"].tolist() for s in (0, 1, 2**64 - 1)]
    assert len({tuple(f) for f in first}) == 3


def test_an_empty_episode_selection_says_so(dataset):
    # It used to blame drop_n_first_frames.
    with pytest.raises(ValueError, match=r"episodes is empty, so there is nothing to read"):
        _loader(dataset, episodes=[])
    with pytest.raises(ValueError, match=r"episodes is empty"):
        _loader([jaxload.DatasetSource(dataset, episodes=np.array([], int))])


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
