"""The content a conversion's records are keyed by (converters/content.py), worked out
before assembly from the units' records: a part that changed on disk after its unit
finished is refused at assembly, never sealed as valid (issue #33)."""

import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

import jaxload
from jaxload import format as fmt
from jaxload.converters import convert as convert_module
from jaxload.converters.convert import convert
from jaxload.converters.partial import partial_dir
from jaxload.errors import JaxloadError
from tests.support.helpers import tree_bytes
from tests.support.lerobot_factory import write_lerobot_v3


class Stop(JaxloadError):
    pass


def test_a_part_changed_after_its_unit_finished_is_converted_again(tmp_path, monkeypatch):
    src = write_lerobot_v3(tmp_path / "src", episode_lengths=(6, 9, 4))
    clean = convert(src, tmp_path / "clean", workers=1, progress=False).out

    def stop(*args, **kwargs):
        raise Stop("stopped after the units, before assembly")

    out = tmp_path / "ds"
    with monkeypatch.context() as patch:
        patch.setattr(convert_module, "job_content", stop)
        with pytest.raises(Stop):
            convert(src, out, workers=1, progress=False)
    parts = sorted((partial_dir(out) / "parts").glob("*.array_record"))
    assert parts, "the finished units are kept for the rerun"
    reader = ArrayRecordReader(str(parts[0]), fmt.READER_OPTIONS)
    records = reader.read_all()
    reader.close()
    records[0] = bytes(b ^ 1 for b in records[0])  # a frame block, same size: a valid file
    parts[0].unlink()
    writer = ArrayRecordWriter(str(parts[0]), fmt.WRITER_OPTIONS)
    for record in records:
        writer.write(record)
    writer.close()
    with pytest.raises(JaxloadError, match=r"records differ from the digest its unit recorded"):
        convert(src, out, workers=1, progress=False)
    convert(src, out, workers=1, progress=False)  # the dropped unit runs again
    assert tree_bytes(out) == tree_bytes(clean)
    assert jaxload.open(out).info.records_key == jaxload.open(clean).info.records_key
