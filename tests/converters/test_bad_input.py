"""Bad input: a clear error naming the file/episode/key, a non-zero exit, no partial output.

Each case breaks a freshly written LeRobot dataset in one way, then runs both the Python
API and the `jaxload` CLI (in-process and, once, as a real subprocess).
"""

import json
import shutil
import subprocess
import sys

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import jaxload
from jaxload.cli import main
from jaxload.converters.convert import convert
from jaxload.converters.partial import partial_dir
from jaxload.errors import DatasetError, JaxloadError, SourceError, WindowError
from tests.support.helpers import leftovers
from tests.support.lerobot_factory import write_lerobot_v3

pytestmark = pytest.mark.integration

LENGTHS = (4, 6, 3)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("pristine")
    good = write_lerobot_v3(root / "good", episode_lengths=LENGTHS, episodes_per_video_file=2)
    short = write_lerobot_v3(root / "short", episode_lengths=(4, 6, 1), episodes_per_video_file=2)
    return good, short


@pytest.fixture
def src(pristine, tmp_path):
    return shutil.copytree(pristine[0], tmp_path / "src")


def _video(root, file_index=0):
    return root / f"videos/observation.images.top/chunk-000/file-{file_index:03d}.mp4"


def _edit_episodes(root, column, episode, value):
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    values = table[column].to_pylist()
    values[episode] = value
    idx = table.column_names.index(column)
    pq.write_table(table.set_column(idx, column, pc.cast(values, table[column].type)), path)


def _expect_failure(src, tmp_path, match):
    """The API raises naming the problem, the CLI exits non-zero, and no output appears."""
    out = tmp_path / "out"
    with pytest.raises(JaxloadError, match=match):
        convert(src, out, workers=1, progress=False)
    _no_output(tmp_path)
    assert main(["convert", str(src), str(out), "--workers", "1"]) != 0
    _no_output(tmp_path)


def _no_output(tmp_path):
    """No OUT, no temp dirs; units finished before the error may stay in the hidden partial
    directory for a rerun (docs/CONVERT.md), which is never a dataset."""
    assert not leftovers(tmp_path, "out")
    partial = partial_dir(tmp_path / "out")
    assert not (partial / "meta").exists() and not (partial / "data").exists()


def test_missing_info_json(src, tmp_path):
    (src / "meta/info.json").unlink()
    _expect_failure(src, tmp_path, r"meta/info\.json: missing")


def test_unsupported_codebase_version(src, tmp_path):
    info = json.loads((src / "meta/info.json").read_text())
    info["codebase_version"] = "v1.6"
    (src / "meta/info.json").write_text(json.dumps(info))
    _expect_failure(src, tmp_path, r"info\.json: codebase_version 'v1\.6' is not supported")


def test_overlapping_episode_ranges(src, tmp_path):
    _edit_episodes(src, "dataset_from_index", 1, 3)
    _expect_failure(src, tmp_path, r"episode 1 starts at frame 3 .* overlaps")


def test_gap_between_episode_ranges(src, tmp_path):
    _edit_episodes(src, "dataset_to_index", 0, 3)
    _edit_episodes(src, "length", 0, 3)
    _expect_failure(src, tmp_path, r"episode 1 starts at frame 4 .* gap")


def test_missing_parquet(src, tmp_path):
    (src / "data/chunk-000/file-000.parquet").unlink()
    _expect_failure(src, tmp_path, r"data/chunk-000/file-000\.parquet: missing")


def test_missing_video(src, tmp_path):
    _video(src, 1).unlink()
    _expect_failure(src, tmp_path, r"file-001\.mp4: missing \(video of episode 2")


def test_zero_byte_video(src, tmp_path):
    _video(src, 0).write_bytes(b"")
    _expect_failure(src, tmp_path, r"file-000\.mp4: empty file \(video of episode 0\)")


def test_truncated_video(src, tmp_path):
    data = _video(src, 0).read_bytes()
    _video(src, 0).write_bytes(data[: len(data) // 2])
    _expect_failure(src, tmp_path, r"file-000\.mp4: episode \d")


def test_too_short_video(src, pristine, tmp_path):
    # The file of episode 2 holds 1 frame where the metadata implies 3.
    shutil.copyfile(_video(pristine[1], 1), _video(src, 1))
    _expect_failure(src, tmp_path, r"file-001\.mp4: episode 2: video too short")


def test_too_short_video_with_stream_copy(tmp_path):
    # --video-codec copy: the source must hold one packet per frame of the episode.
    src = write_lerobot_v3(
        tmp_path / "src", episode_lengths=LENGTHS, episodes_per_video_file=2, video_codec="h264"
    )
    short = write_lerobot_v3(
        tmp_path / "short", episode_lengths=(4, 6, 1), episodes_per_video_file=2, video_codec="h264"
    )
    shutil.copyfile(_video(short, 1), _video(src, 1))
    out = tmp_path / "out"
    match = r"file-001\.mp4: episode 2: video too short: found 1 packets for 3 frames"
    with pytest.raises(SourceError, match=match):
        convert(src, out, video_codec="copy", workers=1, progress=False)
    _no_output(tmp_path)
    assert main(["convert", str(src), str(out), "--workers", "1", "--video-codec", "copy"]) != 0
    _no_output(tmp_path)


@pytest.mark.processes
def test_cli_reports_errors_without_a_traceback(src, tmp_path):
    (src / "meta/info.json").unlink()
    run = subprocess.run(
        [sys.executable, "-m", "jaxload.cli", "convert", str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1
    assert "info.json: missing" in run.stderr and "Traceback" not in run.stderr
    assert not leftovers(tmp_path, "out") and not partial_dir(tmp_path / "out").exists()


@pytest.fixture(scope="module")
def converted(pristine, tmp_path_factory):
    out = tmp_path_factory.mktemp("converted") / "ds"
    convert(pristine[0], out, workers=1, progress=False)
    return out


def test_delta_not_a_frame_multiple(converted):
    """The error names the dataset and its fps (which dataset of a mixture refused)."""
    with pytest.raises(WindowError, match=rf"{converted} \(10 fps\): .*'action'.*0\.15.*1/10"):
        jaxload.open(converted, delta_timestamps={"action": [0.0, 0.15]})


def test_unknown_delta_key(converted):
    with pytest.raises(WindowError, match=r"unknown key 'observation\.image'"):
        jaxload.open(converted, delta_timestamps={"observation.image": [0.0]})


def test_index_out_of_range(converted):
    ds = jaxload.open(converted)
    with pytest.raises(IndexError, match=rf"index {sum(LENGTHS)} out of range .* 13 frames"):
        ds[sum(LENGTHS)]
    assert int(ds[-1]["index"]) == sum(LENGTHS) - 1


def test_unknown_episode_selection(converted):
    with pytest.raises(JaxloadError, match=r"episodes \[7\] not in this dataset"):
        jaxload.open(converted, episodes=[0, 7])


def test_not_a_jaxload_dataset(pristine):
    with pytest.raises(JaxloadError, match=r"not a jaxload dataset"):
        jaxload.open(pristine[0])


def test_newer_format_version_is_refused(converted, tmp_path):
    copy = shutil.copytree(converted, tmp_path / "ds")
    info = json.loads((copy / "meta/info.json").read_text())
    info["format_version"] = 99
    (copy / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(JaxloadError, match=r"format_version 99 is not supported"):
        jaxload.open(copy)


def test_gop_0_is_refused_not_the_default(src, tmp_path, capsys):
    """`--gop 0` converted silently with GOP 4 (`args.gop or DEFAULT_GOP`)."""
    assert main(["convert", str(src), str(tmp_path / "out"), "--gop", "0", "--no-progress"]) == 1
    assert "--gop 0: must be at least 1" in capsys.readouterr().err
    _no_output(tmp_path)


def test_a_path_template_with_a_positional_field(src, tmp_path):
    """`data_path` with `{0}`: a raw IndexError ("Replacement index 0 out of range")."""
    from jaxload.converters.doctor import check_source

    info = json.loads((src / "meta/info.json").read_text())
    info["data_path"] = "data/chunk-{0:03d}/file-{file_index:03d}.parquet"
    (src / "meta/info.json").write_text(json.dumps(info))
    _expect_failure(src, tmp_path, r"meta/info\.json: data_path .* cannot be filled .*IndexError")
    failed = [r for r in check_source(src) if r.status == "FAIL"]
    assert failed and "data_path" in failed[0].detail and "cannot be filled" in failed[0].detail


def test_info_json_that_is_a_json_list(converted, tmp_path, capsys):
    """A raw AttributeError ('list' object has no attribute 'get') from open, info, doctor."""
    copy = shutil.copytree(converted, tmp_path / "ds")
    (copy / "meta/info.json").write_text("[1, 2]")
    with pytest.raises(DatasetError, match=rf"{copy}/meta/info\.json: not a JSON object"):
        jaxload.open(copy)
    for command in ("info", "doctor"):
        assert main([command, str(copy)]) != 0
        err = capsys.readouterr()
        assert "meta/info.json: not a JSON object" in err.out + err.err
        assert "AttributeError" not in err.out + err.err


def test_episode_index_renumbered_in_episodes_parquet(converted, tmp_path):
    """The ids of meta/episodes.parquet edited (still unique and rising): accepted before,
    each sample then said it was of an episode its frames are not."""
    import pyarrow as pa

    copy = shutil.copytree(converted, tmp_path / "ds")
    path = copy / "meta/episodes.parquet"
    table = pq.read_table(path)
    column = table.column_names.index("episode_index")
    renumbered = pa.array([10, 11, 12], table["episode_index"].type)
    pq.write_table(table.set_column(column, "episode_index", renumbered), path)
    with pytest.raises(  # format 5: the column's digest is checked at open
        DatasetError,
        match=r"meta/episodes\.parquet: column episode_index is not what the records were "
        r"written with",
    ):
        jaxload.open(copy)


def test_an_offset_past_int64_names_the_key(converted):
    with pytest.raises(WindowError, match=r"delta_timestamps\['action'\]: \[1e\+18\] s"):
        jaxload.open(converted, delta_timestamps={"action": [1e18]})


def test_source_error_is_a_jaxload_error():
    assert issubclass(SourceError, JaxloadError)


@pytest.mark.parametrize("template", ["data_path", "video_path"])
@pytest.mark.parametrize("escape", ["relative", "absolute"])
def test_paths_outside_the_source_are_never_read(src, tmp_path, template, escape):
    """A crafted info.json naming files outside the dataset (`../`, absolute) is refused
    before anything is opened there, by convert and by doctor."""
    from jaxload.converters.doctor import check_source

    info = json.loads((src / "meta/info.json").read_text())
    folder = "data" if template == "data_path" else "videos"
    outside = tmp_path / "outside"
    shutil.copytree(src / folder, outside)
    original = info[template]
    relative_to_folder = original.split("/", 1)[1]
    info[template] = (
        f"../outside/{relative_to_folder}"
        if escape == "relative"
        else f"{outside}/{relative_to_folder}"
    )
    (src / "meta/info.json").write_text(json.dumps(info))
    _expect_failure(src, tmp_path, r"points outside the dataset; refusing to read it")
    failed = [r for r in check_source(src) if r.status == "FAIL"]
    assert failed and "points outside the dataset" in failed[0].detail


def test_a_chunk_index_that_is_a_path_outside_the_source_is_refused(src, tmp_path):
    """Issue #44: a v3 data/chunk_index of '../../../outside_data/chunk-000' was a raw
    `ValueError: invalid literal for int()`; it is the "points outside the dataset" refusal,
    from convert and from doctor, before anything is opened there."""
    import pyarrow as pa

    from jaxload.converters.doctor import check_source

    (path,) = sorted((src / "meta/episodes").rglob("*.parquet"))
    table = pq.read_table(path)
    column = table.column_names.index("data/chunk_index")
    crafted = pa.array(["../../../outside_data/chunk-000"] * len(table))
    pq.write_table(table.set_column(column, "data/chunk_index", crafted), path)
    _expect_failure(
        src,
        tmp_path,
        r"column data/chunk_index holds '\.\./\.\./\.\./outside_data/chunk-000', a "
        r"path that points outside the dataset; refusing to read it",
    )
    failed = [r for r in check_source(src) if r.status == "FAIL"]
    assert failed and "points outside the dataset" in failed[0].detail
