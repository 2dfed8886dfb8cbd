"""The decode limit (jaxload.tools.bench.limit): the reader's decodes recorded through the
decode backend, replayed with torchcodec alone on threads and processes."""

import hashlib

import numpy as np
import pytest

import jaxload
from jaxload.decode import backend
from jaxload.tools import bench

pytestmark = pytest.mark.integration


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
