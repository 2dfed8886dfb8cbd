"""Reading LeRobot sources at scale: episode metadata as columns (a child process reads a
large footer), each episode's rows found by binary search in its data file."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxload.converters import lerobot_v3
from jaxload.converters.lerobot_common import DataFile
from jaxload.converters.lerobot_v3 import LeRobotV3Source
from jaxload.errors import SourceError
from tests.support.lerobot_factory import write_lerobot_v3

LENGTHS = [3, 1, 4, 6, 2, 5, 2, 8, 1, 3]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("source")
    return write_lerobot_v3(
        root / "src",
        episode_lengths=LENGTHS,
        cameras={},
        episodes_per_data_file=4,
        episodes_per_meta_file=3,
    )


def _meta_rows(src):
    tables = [pq.read_table(p) for p in sorted(src.glob("meta/episodes/*/*.parquet"))]
    return sorted(pa.concat_tables(tables).to_pylist(), key=lambda r: r["episode_index"])


def test_episode_metadata_is_what_the_meta_files_say(source):
    src = LeRobotV3Source(source)
    assert src.episode_ids == list(range(len(LENGTHS)))
    for row in _meta_rows(source):
        ep = src.episode(row["episode_index"])
        assert (ep.length, ep.start, list(ep.tasks)) == (
            row["length"],
            row["dataset_from_index"],
            row["tasks"],
        )
        file = f"data/chunk-{row['data/chunk_index']:03d}/file-{row['data/file_index']:03d}.parquet"
        assert src.data_file(row["episode_index"]) == file
        frames = src.episode_frames(row["episode_index"])
        assert frames["episode_index"].to_pylist() == [row["episode_index"]] * row["length"]
    with pytest.raises(SourceError, match="no episode 99"):
        src.episode(99)


def test_data_file_rows_by_binary_search_or_in_file_order():
    index = pa.array([10, 11, 12, 13, 14])
    table = pa.Table.from_batches(
        [pa.record_batch({"index": index.slice(i, 1), "v": pa.array([i])}) for i in range(5)]
    )  # one chunk per row, as lerobot's row group per episode
    assert DataFile(table).rows(11, 3)["v"].to_pylist() == [1, 2, 3]
    unsorted = pa.table({"index": [13, 10, 12, 11, 14], "v": [0, 1, 2, 3, 4]})
    assert DataFile(unsorted).rows(11, 3)["v"].to_pylist() == [0, 2, 3]  # as filtered


@pytest.mark.processes
def test_a_large_footer_is_read_in_a_child_process(source, monkeypatch):
    inline = LeRobotV3Source(source).episodes
    monkeypatch.setattr(lerobot_v3, "INLINE_FOOTER_BYTES", 0)
    child = LeRobotV3Source(source).episodes
    assert np.array_equal(child.index, inline.index) and child.tasks == inline.tasks
    for key in inline.files:
        assert np.array_equal(child.files[key], inline.files[key])


def test_a_gap_is_named_at_any_episode(source, tmp_path):
    import shutil

    copy = tmp_path / "src"
    shutil.copytree(source, copy)
    path = sorted(copy.glob("meta/episodes/*/*.parquet"))[2]  # episodes 6..8
    table = pq.read_table(path)
    start = table["dataset_from_index"].to_pylist()
    start[1] += 1  # episode 7 starts one frame late
    table = table.set_column(table.schema.get_field_index("dataset_from_index"),
                             "dataset_from_index", [start])  # fmt: skip
    pq.write_table(table, path)
    with pytest.raises(
        SourceError,
        match=r"episode 7 starts at frame 24 but the previous episode ends at 23: .* gap",
    ):
        LeRobotV3Source(copy)
