"""Where a conversion's bytes go (converters/sizes.py, converters/shard_layout.py).

The split must add up to the bytes on disk exactly, its video payload must be the codec
bitstream a demuxer sees, copy mode must add little beyond the source's bitstream on frames
of a realistic size, and the convert summary must say which way its ratio runs.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import av
import pytest

from jaxload import format as fmt
from jaxload.converters.convert import convert
from jaxload.converters.shard_layout import BLOCK, shard_layout
from jaxload.converters.sizes import dataset_sizes, source_sizes
from jaxload.converters.sources import open_files, open_source
from jaxload.decode.frames import build_mp4
from jaxload.format.reader import DatasetFiles
from tests.support.lerobot_factory import write_lerobot_v3

pytestmark = pytest.mark.integration  # converts datasets end to end (~15 s in all)

CAMERAS = {"observation.images.top": (48, 64), "observation.images.wrist": (48, 64)}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sizes")
    return write_lerobot_v3(root / "src", episode_lengths=(20, 7, 33), cameras=CAMERAS)


@pytest.fixture(scope="module")
def converted(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("sizes_out") / "ds"
    report = convert(source, out, workers=1, progress=False, shard_bytes=40_000)
    return out, report


def disk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def demuxed_payload(root: Path, camera: str) -> int:
    """The camera's stored bitstream as a demuxer sees it: every GOP behind its init
    segment, as the reader builds its mp4s, packet sizes summed by PyAV."""
    files = DatasetFiles(root)
    episodes = files.episodes
    total = 0
    for row in range(len(episodes)):
        for segment in range(episodes.segments[camera].count(row)):
            init, fragment = files.read_gop(row, camera, segment)
            mp4, _ = build_mp4(init, [fragment])
            with av.open(io.BytesIO(mp4)) as container:
                total += sum(p.size for p in container.demux(container.streams.video[0]) if p.size)
    return total


def test_split_sums_to_the_bytes_on_disk(converted):
    out, report = converted
    sizes = dataset_sizes(out)
    assert sizes.total == disk_bytes(out) == report.output_bytes
    assert sizes.shards == fmt.read_info(out).num_shards > 1  # several shards, each accounted
    fields = [sizes.gop_boxes, sizes.init_segments, sizes.tabular_stored, sizes.record_framing]
    fields += [sizes.record_index, sizes.shard_tail, *sizes.video_payload.values()]
    assert min(fields) > 0 and sizes.other == 0
    assert set(sizes.metadata) >= {fmt.INFO_PATH, fmt.EPISODES_PATH, "meta/stats_sketch.npz"}
    # The frame records compress (zstd): stored below their raw rows.
    assert sizes.tabular_zstd < 0 and 0 < sizes.tabular_stored < sizes.tabular


def test_video_payload_is_the_demuxed_bitstream(converted):
    out, _ = converted
    sizes = dataset_sizes(out)
    for camera in CAMERAS:
        assert sizes.video_payload[camera] == demuxed_payload(out, camera)


def test_each_shard_splits_into_records_framing_index_and_tail(converted):
    out, _ = converted
    info = fmt.read_info(out)
    for shard in range(info.num_shards):
        layout = shard_layout(out / fmt.shard_path(shard))
        assert layout.records.sum() + layout.framing + layout.footer + layout.tail == layout.size
        assert len(layout.records) == info.shard_records[shard]
        # ArrayRecord pads footer and postscript to 64 KiB blocks: the tail is < 128 KiB.
        assert layout.size % BLOCK == 0 and 0 < layout.tail < 2 * BLOCK
        # ... and nothing else: fmt.WRITER_OPTIONS pads no chunk (signature, block headers).
        assert layout.framing < 1024


def test_source_split_matches_a_demux_of_the_source(source):
    src = open_source(open_files(source))
    sizes = source_sizes(src, src.episode_ids)
    for camera in CAMERAS:
        rel = src.video_span(src.episode_ids[0], camera).rel
        with av.open(str(source / rel)) as container:
            packets = sum(p.size for p in container.demux(container.streams.video[0]) if p.size)
        assert sizes.video_payload[camera] == packets < sizes.video_files[camera]
    assert sizes.total == sum(sizes.video_files.values()) + sizes.data_files
    assert sizes.meta_files > 0


def test_a_subset_counts_its_share_of_shared_video_files(source):
    src = open_source(open_files(source))
    whole = source_sizes(src, src.episode_ids)
    first = source_sizes(src, src.episode_ids[:1])  # 20 of 60 frames of each (one) file
    for camera in CAMERAS:
        assert first.video_files[camera] == round(whole.video_files[camera] * 20 / 60)
        assert first.video_payload[camera] == round(whole.video_payload[camera] * 20 / 60)
    assert first.data_files == round(whole.data_files * 20 / 60)


def test_summary_says_which_way_the_ratio_runs(converted):
    _, report = converted
    text = report.summary()
    ratio = report.output_bytes / report.source_bytes
    line = next(line for line in text.splitlines() if line.startswith("output:"))
    assert f"output is {ratio:.2f}x the source (" in line
    stored = sum(report.sizes.output.video_payload.values())
    reencoding = stored / sum(report.sizes.source.video_payload.values())
    assert f"of which the video {reencoding:.2f}x (stored / source video bitstream)" in line
    sizes_line = next(line for line in text.splitlines() if line.startswith("sizes:"))
    assert re.match(
        r"sizes: \d+ KiB fixed \(metadata \d+ KiB incl\. the stats sketch's \d+ KiB, shard padding "
        r"\d+ KiB\) \+ \d+ KiB that grow with the frames \(\d+ (KiB|B) per frame\), \d+\.\d\dx the source: video \d+ KiB, container "
        r"\+\d+\.\d% of it \(mp4 boxes, record framing, index\), tabular \d+ KiB$",
        sizes_line,
    ), sizes_line


def test_summary_of_a_dataset_without_cameras(tmp_path):
    src = write_lerobot_v3(tmp_path / "src", episode_lengths=(30, 5), cameras={})
    report = convert(src, tmp_path / "ds", workers=1, progress=False)
    lines = report.summary().splitlines()
    assert any(line.endswith("of data and video files); no cameras") for line in lines)
    sizes_line = next(line for line in lines if line.startswith("sizes:"))
    assert re.search(
        r"the source: tabular \d+ (KiB|B), record framing and index \d+ (KiB|B)$", sizes_line
    )
    assert report.sizes.output.video == 0 and report.sizes.reencoding is None


def test_summary_names_the_crf_a_target_chose(source, tmp_path):
    report = convert(source, tmp_path / "ds", workers=1, progress=False, min_psnr=30)
    crfs = fmt.read_info(tmp_path / "ds").converter["camera_crf"]
    assert set(crfs) == set(CAMERAS)
    for camera, crf in crfs.items():
        assert f"fidelity {camera}: PSNR min " in report.summary()
        assert f"(crf {crf}, chosen for the fidelity target)" in report.summary()


def test_copy_adds_little_to_the_bitstream_of_real_sized_frames(tmp_path):
    """Per-frame bytes that are not video payload stay under 5% in copy mode, once frames
    are as large as a camera's (here 480x640: ~5 KB per frame at the source's crf 30);
    the benchmark checks the same on 50 MB (benchmarks/bench_size.py)."""
    src = write_lerobot_v3(
        tmp_path / "src", episode_lengths=(30, 30), cameras={"observation.images.top": (480, 640)}
    )
    report = convert(src, tmp_path / "copy", workers=1, progress=False, video_codec="copy")
    sizes = report.sizes
    assert sizes.output.not_video_fraction <= 0.05, sizes.output.to_json()
    assert 0.98 <= sizes.reencoding <= 1.02  # the source's packets, parameter sets in-band


@pytest.mark.processes
def test_bench_size_quick(tmp_path):
    """benchmarks/bench_size.py end to end on its tiny source (no decode-speed table)."""
    import json

    from benchmarks import bench_size

    out = tmp_path / "size.json"
    argv = ["--quick", "--no-table", "--cache", str(tmp_path / "cache"), "--out", str(out)]
    assert bench_size.main(argv) == 0
    doc = json.loads(out.read_text())
    copy = doc["large"]["copy"]
    assert copy["reencoding"] == 1.0  # the source's bitstream, byte for byte
    assert copy["output"]["total"] == disk_bytes(Path(copy["dataset"]))
    assert doc["target"]["not_video_fraction"] == copy["output"]["not_video_fraction"]
    assert not doc["target"]["met"]  # the quick source is far below 50 MB
