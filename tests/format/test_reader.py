"""The one reader of a converted dataset (jaxload.format.reader): info.json, the tables and
the records read through a `DatasetStorage`, every frame row streamed in order."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from jaxload.errors import DatasetError
from jaxload.format import reader
from jaxload.format.mp4 import sample_entry
from jaxload.format.reader import DatasetFiles, read_episodes, read_info, read_tasks
from jaxload.format.storage import LocalDirectory
from jaxload.storage.object_store import ObjectStore
from tests.format.conftest import CAM, LENGTHS
from tests.support.remote_fakes import serve_locally

URL = "s3://local/ds"


def test_read_info_names_what_is_not_a_dataset(tmp_path):
    with pytest.raises(DatasetError, match=rf"{tmp_path}/none: no such directory"):
        read_info(tmp_path / "none")
    with pytest.raises(DatasetError, match=rf"{tmp_path}/meta/info\.json: missing; is {tmp_path} "):
        read_info(tmp_path)


def test_a_url_without_info_json_is_named_missing_not_a_directory(monkeypatch, tmp_path):
    serve_locally(monkeypatch, URL, tmp_path)
    with pytest.raises(DatasetError, match=r"s3://local/ds/meta/info\.json: missing; is s3://"):
        read_info(ObjectStore(URL))


def test_the_tables_are_read_from_a_path_or_a_storage(camera_converted):
    info = read_info(camera_converted)
    assert (info.total_episodes, info.total_frames) == (len(LENGTHS), sum(LENGTHS))
    assert read_info(LocalDirectory(camera_converted)) == info
    assert read_episodes(camera_converted, info).length.tolist() == list(LENGTHS)
    tasks = read_tasks(camera_converted)
    assert sorted(tasks) == list(range(len(tasks))) and all(
        isinstance(t, str) for t in tasks.values()
    )
    files = DatasetFiles(camera_converted)
    assert files.root == str(camera_converted) and files.tasks() == tasks
    assert files.info == info and files.episodes.length.tolist() == list(LENGTHS)


def test_records_are_checked_at_open_only_where_they_are_local(monkeypatch, camera_converted):
    """A local dataset's first records are checked against info.json at open; a remote
    one's are verified as they are fetched (no request at open)."""
    checked = []
    monkeypatch.setattr(reader, "check_first_records", checked.append)
    local = DatasetFiles(camera_converted)
    assert checked == [local]
    DatasetFiles(camera_converted, check_records=False)
    serve_locally(monkeypatch, URL, camera_converted)
    remote = DatasetFiles(ObjectStore(URL))
    assert checked == [local] and remote.info == local.info
    remote.readers.store.close()


def test_every_frame_row_streams_in_order_however_reads_are_cut(camera_converted):
    files = DatasetFiles(camera_converted)
    rows = np.concatenate(list(files.iter_frames()))
    assert rows["index"].tolist() == list(range(sum(LENGTHS)))
    expected_frames = [f for n in LENGTHS for f in range(n)]
    assert rows["frame_index"].tolist() == expected_frames
    assert rows["episode_index"].tolist() == [e for e, n in enumerate(LENGTHS) for _ in range(n)]
    one_block = np.concatenate(list(files.iter_frames(blocks_per_read=1)))
    assert one_block.tobytes() == rows.tobytes()
    some = np.concatenate(list(files.iter_frames([3, 1])))
    assert some["episode_index"].tolist() == [3] * LENGTHS[3] + [1]


class _ShortFrames:
    """A RecordReader dropping the last byte of every frame-block record of episode 2 (the
    ones of 40 frames): what a reader must refuse, not cut into rows."""

    def __init__(self, inner, records):
        self.inner, self.records = inner, set(records)

    def read(self, shard, records, context=None):
        data = self.inner.read(shard, records, context)
        return [d[:-1] if (shard, r) in self.records else d for r, d in zip(records, data)]

    def close(self):
        self.inner.close()


def test_frame_records_that_do_not_hold_whole_rows_name_the_episode(camera_converted):
    files = DatasetFiles(camera_converted)
    ep = files.episodes
    short = [(int(ep.shard[2]), r) for r in ep.frame_records(2)]
    files.readers = _ShortFrames(files.readers, short)
    with pytest.raises(DatasetError, match=r"shard-00000\.array_record: episode 2: frame records"):
        list(files.iter_frames())


def test_a_gop_and_its_init_segment_are_read_by_episode_and_number(camera_converted):
    files = DatasetFiles(camera_converted)
    init, gop = files.read_gop(2, CAM, 3)
    assert sample_entry(init)[1:] == (64, 24)
    assert gop[4:8] in (b"moof", b"styp")
    lengths = [files.gop_length(2, CAM, s) for s in range(files.episodes.segments[CAM].count(2))]
    assert sum(lengths) == LENGTHS[2]


def test_a_missing_table_names_the_file(camera_converted, tmp_path):
    copy = shutil.copytree(camera_converted, tmp_path / "ds")
    (copy / "meta/episodes.parquet").unlink()
    with pytest.raises(DatasetError, match=r"ds/meta/episodes\.parquet: missing"):
        DatasetFiles(copy)
