"""Small real sources shared by the converter's unit tests (written once per session)."""

from __future__ import annotations

import pytest

from tests.support.lerobot_factory import write_lerobot_v3


@pytest.fixture(scope="session")
def small_v3(tmp_path_factory):
    """A LeRobot v3.0 dataset: episodes of 5 and 3 frames, one 48x64 H.264 camera in one
    mp4 (so episode 1 starts inside the file), 10 fps."""
    return write_lerobot_v3(tmp_path_factory.mktemp("small_v3") / "src", episode_lengths=(5, 3))


# Episodes of the multi-file source (`multi_file_v3`): 8 of unequal lengths, one of 1 frame.
MULTI_FILE_LENGTHS = (12, 3, 30, 7, 1, 18, 5, 9)


@pytest.fixture(scope="session")
def multi_file_v3(tmp_path_factory):
    """A LeRobot v3.0 dataset over several files: two cameras of different sizes, 3
    episodes per data file, 2 and 3 per video file (episodes start inside files)."""
    return write_lerobot_v3(
        tmp_path_factory.mktemp("multi_file_v3") / "src",
        episode_lengths=MULTI_FILE_LENGTHS,
        cameras={"observation.images.top": (48, 64), "observation.images.wrist": (40, 72)},
        episodes_per_data_file=3,
        episodes_per_video_file={"observation.images.top": 2, "observation.images.wrist": 3},
    )


def source_features(source):
    """The tabular features the converter stores for `source` (as converters/convert.py
    derives them from its first episode's data file)."""
    from jaxload.converters.tabular import features_from_schema

    schema = source.data_schema(source.episode_ids[0])
    columns = source.tabular_columns(schema.names)
    return features_from_schema(schema, columns, source.features, "test")
