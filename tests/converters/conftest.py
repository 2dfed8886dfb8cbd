"""Small real sources shared by the converter's unit tests (written once per session)."""

from __future__ import annotations

import pytest

from tests.support.lerobot_factory import write_lerobot_v3


@pytest.fixture(scope="session")
def small_v3(tmp_path_factory):
    """A LeRobot v3.0 dataset: episodes of 5 and 3 frames, one 48x64 H.264 camera in one
    mp4 (so episode 1 starts inside the file), 10 fps."""
    return write_lerobot_v3(tmp_path_factory.mktemp("small_v3") / "src", episode_lengths=(5, 3))


def source_features(source):
    """The tabular features the converter stores for `source` (as converters/convert.py
    derives them from its first episode's data file)."""
    from jaxload.converters.tabular import features_from_schema

    schema = source.data_schema(source.episode_ids[0])
    columns = source.tabular_columns(schema.names)
    return features_from_schema(schema, columns, source.features, "test")
