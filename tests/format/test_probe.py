"""info.json checked against the first episode's records at open (jaxload.format.probe):
the real records of a conversion, with info.json's description edited in memory, or an
init segment that is not one."""

from __future__ import annotations

import dataclasses

import pytest

from jaxload.errors import DatasetError
from jaxload.format.layout import Feature
from jaxload.format.probe import check_first_records
from jaxload.format.reader import DatasetFiles
from tests.format.conftest import CAM


@pytest.fixture
def files(camera_converted):
    return DatasetFiles(camera_converted, check_records=False)


def _with_camera(files, **changes):
    camera = dataclasses.replace(files.info.cameras[CAM], **changes)
    files.info = dataclasses.replace(files.info, cameras={CAM: camera})
    return files


def test_the_records_of_a_conversion_are_what_its_info_json_says(files):
    check_first_records(files)


@pytest.mark.parametrize("field, value", [("width", 32), ("height", 48)])
def test_a_camera_size_other_than_the_records_names_the_field(files, field, value):
    with pytest.raises(
        DatasetError,
        match=rf"meta/info\.json: cameras\.{CAM}\.{field} is {value}, but its "
        r"records hold 64x24 frames \(.*shard-00000\.array_record: episode 0\)",
    ):
        check_first_records(_with_camera(files, **{field: value}))


@pytest.mark.parametrize("codec", ["hevc", "av1", "h264rgb"])
def test_a_codec_other_than_the_records_names_it(files, codec):
    if codec == "h264rgb":  # the same family as the h264 records: accepted
        check_first_records(_with_camera(files, codec=codec))
        return
    with pytest.raises(DatasetError, match=rf"cameras\.{CAM}\.codec is '{codec}', but its "
                       r"records hold 'avc1' video"):  # fmt: skip
        check_first_records(_with_camera(files, codec=codec))


def test_frame_rows_of_another_size_name_the_features(files):
    features = dict(files.info.features)
    features["action"] = Feature("float32", (5,))
    files.info = dataclasses.replace(files.info, features=features)
    with pytest.raises(DatasetError, match=r"info\.json: features describe frame rows of \d+ "
                       r"bytes, but the first 5 frames of .*episode 0 are stored in"):  # fmt: skip
        check_first_records(files)


class _BadInit:
    def __init__(self, inner):
        self.inner = inner

    def read(self, shard, records, context=None):
        block, *inits = self.inner.read(shard, records, context)
        return [block, *(b"\x00\x00\x00\x10junkjunkjunk" for _ in inits)]

    def close(self):
        self.inner.close()


def test_an_init_segment_that_does_not_parse_names_episode_and_camera(files):
    files.readers = _BadInit(files.readers)
    with pytest.raises(DatasetError, match=rf"episode 0, camera {CAM}: the init segment does not"):
        check_first_records(files)
