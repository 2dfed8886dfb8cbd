"""What a dataset costs here (jaxload.autotune.probe): record and sample sizes, decode times
on segments spread over the episodes, and whole samples read with the windows asked for,
on real converted datasets (two cameras, one windowed; and one without video)."""

import numpy as np
import pytest

import jaxload
from jaxload.autotune import probe as probe_module
from jaxload.autotune.probe import probe_dataset
from jaxload.converters.convert import convert
from jaxload.format.reader import DatasetFiles
from tests.support.lerobot_factory import write_lerobot_v3

pytestmark = pytest.mark.integration

TOP, WRIST = "observation.images.top", "observation.images.wrist"
WINDOWS = {"action": [0.0, 0.1, 0.2], TOP: [-0.1, 0.0]}
LENGTHS = (9, 4, 7, 12, 6)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    src = write_lerobot_v3(root / "src", episode_lengths=LENGTHS,
                           cameras={TOP: (48, 64), WRIST: (64, 80)})  # fmt: skip
    tabular = write_lerobot_v3(root / "tabular_src", episode_lengths=(5, 3), cameras={})
    convert(src, root / "video", workers=1, progress=False)
    convert(tabular, root / "tabular", workers=1, progress=False)
    return root / "video", root / "tabular"


def test_a_probe_measures_every_camera_on_segments_spread_over_the_episodes(converted):
    path, _ = converted
    probe = probe_dataset(path, delta_timestamps=WINDOWS, segments=3, samples=4)
    ds = jaxload.open(path, delta_timestamps=WINDOWS)
    assert (probe.path, probe.frames, probe.episodes) == (ds.path, sum(LENGTHS), len(LENGTHS))
    assert probe.frame_record_bytes == ds.info.frame_dtype.itemsize
    spec = ds.element_spec()
    assert probe.sample_bytes == sum(
        int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize for s in spec.values()
    )
    assert probe.sample_bytes > (2 * 48 * 64 + 64 * 80) * 3  # two top frames, one wrist
    assert probe.sample_ms > 0 and sorted(probe.cameras) == [TOP, WRIST]
    top, wrist = probe.cameras[TOP], probe.cameras[WRIST]
    assert (top.height, top.width, wrist.height, wrist.width) == (48, 64, 64, 80)
    assert top.codec == ds.info.cameras[TOP].codec and wrist.codec == ds.info.cameras[WRIST].codec
    assert (top.frames_per_sample, wrist.frames_per_sample) == (2, 1)  # the windows asked for
    for camera in (top, wrist):
        assert camera.segments_measured == 3 and camera.segment_bytes > 0
        assert 1 <= camera.frames_per_segment <= max(LENGTHS)
        assert camera.decode_ms_per_frame > 0 and camera.decode_ms_random > 0
    assert probe.to_json()["cameras"][TOP]["frames_per_sample"] == 2


def test_segments_are_the_middle_gop_of_episodes_spread_over_the_selection(converted):
    path, _ = converted
    ds = jaxload.open(path)
    files = DatasetFiles(ds.storage)
    try:

        def middle(row):
            s = files.episodes.segments[TOP].count(row) // 2
            return files.read_gop(row, TOP, s)[1], files.gop_length(row, TOP, s)

        inits, segments, lengths = probe_module._sample_segments(
            ds.storage, ds.episode_index, TOP, 3
        )
        assert list(zip(segments, lengths)) == [middle(row) for row in (0, 2, 4)]  # spread
        assert all(init == inits[0] for init in inits)  # one camera: one init segment
        # more segments asked than episodes: each episode once
        _, many, _ = probe_module._sample_segments(ds.storage, ds.episode_index, TOP, 50)
        assert many == [middle(row)[0] for row in range(len(LENGTHS))]
        # a selection of episodes: only those
        _, chosen, _ = probe_module._sample_segments(ds.storage, [1, 3], TOP, 8)
        assert chosen == [middle(1)[0], middle(3)[0]]
    finally:
        files.readers.close()


def test_an_opened_dataset_keeps_its_own_windows_and_tabular_data_has_no_cameras(converted):
    path, tabular = converted
    opened = jaxload.open(path)  # no windows: one frame of each camera
    probe = probe_dataset(opened, delta_timestamps=WINDOWS, segments=1, samples=2)
    assert probe.cameras[TOP].frames_per_sample == 1 and probe.cameras[TOP].segments_measured == 1
    table = probe_dataset(tabular, segments=2, samples=2)
    assert table.cameras == {} and table.frames == 8 and table.episodes == 2
    assert table.sample_ms > 0 and table.sample_bytes > 0


def test_a_map_style_dataset_is_refused_by_name_not_failed_on():
    """Found by tests/resolution/test_resolve.py's author: autotune=True over a dataset of
    the caller's raised AttributeError ('tuple' object has no attribute 'shape')."""
    from jaxload.autotune import tuned_loader_kwargs
    from jaxload.episode_dataset import MapDataset
    from tests.support.fake_dataset import FakeDataset

    for dataset in (FakeDataset([50]), MapDataset(FakeDataset([50]))):
        with pytest.raises(ValueError, match=r"autotune measures jaxload datasets.*FakeDataset"):
            tuned_loader_kwargs([dataset], host_count=1)
