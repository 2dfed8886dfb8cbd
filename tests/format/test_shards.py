"""Reading a shard's records: consecutive records in one range read, in the order asked;
every frame row streamed in runs of consecutive records, each episode checked."""

import numpy as np
import pytest

import jaxload
from jaxload.converters.convert import convert
from jaxload.errors import DatasetError
from jaxload.format.reader import DatasetFiles
from tests.support.lerobot_factory import write_lerobot_v3

LENGTHS = [3, 40, 1, 70, 2, 2, 33, 5]


@pytest.fixture(scope="module")
def tabular(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    src = write_lerobot_v3(root / "src", episode_lengths=LENGTHS, cameras={})
    return convert(src, root / "ds", workers=1, progress=False, shard_bytes=6000).out


def test_consecutive_and_scattered_reads_return_the_records_asked(tabular):
    files = DatasetFiles(tabular)
    single = [files.readers.read(0, [r])[0] for r in range(4)]
    assert files.readers.read(0, [0, 1, 2, 3]) == single  # one range read
    assert files.readers.read(0, [2, 1, 3, 0]) == [single[i] for i in (2, 1, 3, 0)]
    assert files.readers.read(0, [1, 3, 2]) == [single[i] for i in (1, 3, 2)]
    assert files.readers.read(0, range(1, 3)) == single[1:3]


@pytest.mark.parametrize("blocks_per_read", [1, 2, 3, 512])
def test_every_frame_row_streams_in_order(tabular, blocks_per_read):
    files = DatasetFiles(tabular)
    assert files.info.num_shards > 1  # runs stop at shard ends
    rows = np.concatenate(list(files.iter_frames(blocks_per_read=blocks_per_read)))
    assert rows["index"].tolist() == list(range(sum(LENGTHS)))
    assert np.array_equal(rows["episode_index"], np.repeat(np.arange(len(LENGTHS)), LENGTHS))
    some = np.concatenate(list(files.iter_frames([6, 1], blocks_per_read=blocks_per_read)))
    assert some["episode_index"].tolist() == [6] * 33 + [1] * 40


def test_two_shards_swapped_are_named_by_the_count_check_at_every_read(tmp_path):
    """Issue #44: the first read of a swapped shard named it (its record count), but the
    reader had been kept before the check, so every later read in that thread served from
    it: "cannot read records (index 85 out of bound 84)", or another shard's records."""
    src = write_lerobot_v3(
        tmp_path / "src", episode_lengths=(20, 6, 30, 12, 3, 25), cameras={"cam": (24, 64)}
    )
    out = convert(src, tmp_path / "ds", workers=1, progress=False, shard_bytes=16384).out
    counts = jaxload.open(out).info.shard_records
    assert len(counts) >= 3 and counts[1] != counts[2]
    data = out / "data"
    for suffix in ("array_record", "offsets"):
        one, two = data / f"shard-00001.{suffix}", data / f"shard-00002.{suffix}"
        one.rename(data / "swap")
        two.rename(one)
        (data / "swap").rename(two)
    ds = jaxload.open(out)  # shard 0 is intact
    first = int(ds._episodes.start[np.flatnonzero(ds._episodes.shard == 1)[0]])
    for _ in range(3):  # the same clear error every time, in the same thread
        with pytest.raises(DatasetError) as raised:
            ds[first]
        assert f"shard-00001.array_record: holds {counts[2]} records but" in str(raised.value)
        assert f"says {counts[1]}" in str(raised.value)
