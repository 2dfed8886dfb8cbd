"""The decode limit (jaxload.tools.bench.limit): the reader's decodes recorded through the
decode backend, replayed with torchcodec alone on threads and processes."""

import hashlib

import numpy as np
import pytest

import jaxload
from jaxload.decode import backend
from jaxload.tools import bench
from jaxload.tools.bench import limit
from tests.support.fake_dataset import FakeDataset


@pytest.mark.integration
@pytest.mark.processes
def test_decode_limit_replays_exactly_the_frames_the_reader_decodes(small):
    _, path = small
    windows = bench.bench_windows(path)
    ds = jaxload.open(path, delta_timestamps=windows)
    positions = np.random.default_rng(0).integers(0, len(ds), 8)
    before = backend.current()
    calls = bench.record_decode_calls(ds, [positions])
    assert backend.current() is before  # the recorder is uninstalled after the block
    assert calls and all(isinstance(c.mp4, bytes) and c.device == "cpu" for c in calls)
    assert all(c.indices for c in calls)  # every opened mp4 was asked for frames
    replayed = set()
    for call in calls:
        for frames in call():
            for image in np.asarray(frames):
                replayed.add(hashlib.sha256(np.ascontiguousarray(image).tobytes()).hexdigest())
    delivered = set()
    for sample in ds.__getitems__(positions.tolist()):
        for cam in ds.camera_keys:
            images = sample[cam] if sample[cam].ndim == 4 else sample[cam][None]
            delivered |= {hashlib.sha256(i.tobytes()).hexdigest() for i in images}
    assert delivered <= replayed
    limit = bench.decode_limit(path, windows, [positions], threads=(1, 2), processes=1, repeats=1)
    assert limit.samples == 8 and limit.samples_per_s > 0
    assert set(limit.seconds_by_setup) == {"1 thread", "2 threads", "1 process"}


def test_a_reader_that_decodes_nothing_has_no_limit_to_measure():
    ds = FakeDataset([4, 4])  # frames made in memory: no mp4 through the decode backend
    before = backend.current()
    with pytest.raises(RuntimeError, match="the reader opened no mp4 through the decode backend"):
        limit.record_decode_calls(ds, [np.array([0, 5])])
    assert backend.current() is before  # uninstalled on the error too
    assert limit.record_decode_calls(ds, []) == []  # nothing asked: nothing to say


def test_set_ups_are_named_in_words():
    names = [limit._plural(n, w) for n, w in [(1, "thread"), (4, "thread"), (1, "process"),
                                              (2, "process")]]  # fmt: skip
    assert names == ["1 thread", "4 threads", "1 process", "2 processes"]


@pytest.mark.integration
def test_replaying_on_threads_decodes_every_call_once(small):
    _, path = small
    ds = jaxload.open(path, delta_timestamps=bench.bench_windows(path))
    calls = limit.record_decode_calls(ds, [np.arange(6), np.arange(6) + 10])
    assert sum(c.frames for c in calls) == sum(len(i) for c in calls for i in c.indices) > 0
    asked = []

    class Counted(limit.DecodeCall):
        def __call__(self):
            asked.append(id(self))
            return super().__call__()

    counted = [Counted(c.mp4, c.device, c.indices) for c in calls]
    assert len(counted) >= 2
    for threads in (1, 2):
        asked.clear()
        done = limit.replay(counted, threads)
        assert sorted(asked) == sorted(id(c) for c in counted)  # each once, on any thread
        assert done.seconds > 0 and done.cpu_seconds >= 0
    with pytest.raises(ValueError, match="needs at least one served sample"):
        bench.decode_limit(path, None, [np.array([], np.int64)])
