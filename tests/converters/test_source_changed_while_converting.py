"""A source file replaced while `jaxload convert` runs (issue #44): before, the run exited 0
with an output mixing both versions (the units before the change had read the old file,
the ones after it the new), and doctor passed. Now the stamps each unit recorded before
reading its files (converters/source_stamps.py) are compared once every unit has run: the
units that read a changed file are converted again, so the output is a clean conversion
of the file as it is now, or the run fails when the file keeps changing."""

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jaxload
from jaxload.converters import source_stamps
from jaxload.converters.convert import convert
from jaxload.converters.partial import JobState
from jaxload.errors import JaxloadError
from tests.support.helpers import tree_bytes
from tests.support.lerobot_factory import write_lerobot_v3

pytestmark = pytest.mark.integration

LENGTHS = (20, 6, 30, 12, 3, 25)
DATA = "data/chunk-000/file-000.parquet"  # episodes 0, 1, 2


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_lerobot_v3(
        tmp_path_factory.mktemp("changing") / "src",
        episode_lengths=LENGTHS,
        episodes_per_data_file=3,
        episodes_per_video_file=3,
    )


def _add_to_action(data, amount: float) -> None:
    table = pq.read_table(data)
    field = table.schema.field("action")
    moved = [[v + amount for v in row] for row in table.column("action").to_pylist()]
    column = table.schema.get_field_index("action")
    pq.write_table(table.set_column(column, field, pa.array(moved, field.type)), data)


def _change_after_units(monkeypatch, data, units: int, every: bool = False) -> list[int]:
    """Adds 1000 to every action of `data` once `units` units have finished (after each
    one from then on with `every`), as a user's copy would while the run goes on."""
    finished, changes = [0], []
    record_unit = JobState.record_unit

    def record_then_change(self, result):
        summary = record_unit(self, result)
        finished[0] += 1
        if finished[0] == units or (every and finished[0] > units):
            _add_to_action(data, 1000.0)
            changes.append(finished[0])
        return summary

    monkeypatch.setattr(JobState, "record_unit", record_then_change)
    return changes


def test_a_file_replaced_mid_run_is_converted_in_one_version(source, tmp_path, monkeypatch):
    src = shutil.copytree(source, tmp_path / "src")
    before = pq.read_table(src / DATA).column("action").to_pylist()
    with monkeypatch.context() as patch:
        changes = _change_after_units(patch, src / DATA, units=2)
        out = convert(src, tmp_path / "ds", workers=1, progress=False).out
    assert changes == [2]
    clean = convert(src, tmp_path / "clean", workers=1, progress=False).out
    assert tree_bytes(out) == tree_bytes(clean)  # the new version throughout
    ds = jaxload.open(out)
    for episode in (0, 1, 2):
        first = int(ds.episode_data_index["from"][episode])
        row = sum(LENGTHS[:episode])
        assert np.allclose(ds[first]["action"], np.asarray(before[row]) + 1000.0), episode


def test_a_file_that_keeps_changing_fails_the_run(source, tmp_path, monkeypatch):
    src = shutil.copytree(source, tmp_path / "src")
    out = tmp_path / "ds"
    with monkeypatch.context() as patch:
        _change_after_units(patch, src / DATA, units=1, every=True)
        with pytest.raises(JaxloadError, match=rf"{DATA} changed while it was being converted"):
            convert(src, out, workers=1, progress=False)
    assert not out.exists()
    assert source_stamps.CHANGED_RERUNS >= 1
    # Once nobody writes it, the same command finishes with the file as it is.
    convert(src, out, workers=1, progress=False)
    clean = convert(src, tmp_path / "clean", workers=1, progress=False).out
    assert tree_bytes(out) == tree_bytes(clean)
