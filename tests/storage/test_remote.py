"""Training straight from object storage: a real S3-compatible server (moto's server mode,
a subprocess on loopback, tests/support/s3_server.py) with injected latency and faults, read
through s3fs. Every check compares with the same converted dataset read locally."""

import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordReader

import jaxload
from jaxload import PipelineOptions
from jaxload import format as fmt
from jaxload.converters.convert import convert
from jaxload.errors import CorruptRecordError, DatasetError, JaxloadError
from jaxload.format.chunks import decode_chunk, record_offsets
from jaxload.storage.object_store import ObjectStore
from jaxload.storage.remote import RemoteOptions
from jaxload.storage.retry import RetryPolicy

pytest.importorskip("s3fs", reason="the remote extra (pip install 'jaxload[remote]') is needed")
pytest.importorskip("moto", reason="moto[server] (the dev extra) runs the S3 test server")

from tests.support.s3_server import S3Server

pytestmark = pytest.mark.processes  # the S3 test server is a subprocess

WINDOWS = {"action": [0.0, 0.1, 0.2], "observation.images.top": [-0.1, 0.0]}
FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


@pytest.fixture(scope="module")
def converted(shared_lerobot, tmp_path_factory):
    root = tmp_path_factory.mktemp("remote_ds")
    return convert(shared_lerobot / "av1_multi", root / "ds", workers=1, progress=False).out


@pytest.fixture(scope="module")
def server(converted):
    server = S3Server.start(latency_s=0.02)
    try:
        server.upload(str(converted), "s3://bucket/ds")
        yield server
    finally:
        server.stop()


@pytest.fixture
def clean(server):
    server.set(latency_s=0.02, fail=None)
    yield server
    server.set(latency_s=0.02, fail=None)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] if isinstance(a[k], str) else np.array_equal(a[k], b[k]) for k in a
    )


def _loaders(server, converted, remote_options: RemoteOptions, **kwargs):
    """(local loader, remote loader) over the same converted dataset, same arguments."""
    local = jaxload.make_loader(converted, **kwargs)
    remote = jaxload.make_loader(
        "s3://bucket/ds", storage_options=server.storage_options(), remote=remote_options, **kwargs
    )
    return local, remote


def _remote(server, url="s3://bucket/ds", **kwargs):
    options = RemoteOptions(retry=FAST_RETRY, **kwargs)
    return jaxload.open(
        url, delta_timestamps=WINDOWS, storage_options=server.storage_options(), remote=options
    )


def test_metadata_is_read_by_name_where_it_lives(clean, converted):
    """Opening a dataset URL reads the metadata files the format names, from the store
    (jaxload.storage.object_store): an unrelated object under meta/ is never fetched and
    nothing is copied to local disk. Before, every object under meta/ was fetched whole
    into a local temporary directory at open."""
    fs = clean.filesystem()
    fs.pipe("bucket/ds/meta/unrelated.bin", b"\0" * (4 << 20))
    scratch = set(os.listdir(tempfile.gettempdir()))
    clean.reset_counters()
    try:
        ds = _remote(clean)
        fetched = clean.counters()["bytes"]
        stats = ds.stats  # meta/stats.json, read there too
    finally:
        fs.rm("bucket/ds/meta/unrelated.bin")
    assert fetched < 1 << 20, fetched
    made = {n for n in set(os.listdir(tempfile.gettempdir())) - scratch if "meta" in n}
    assert made == set()
    local = jaxload.open(converted)
    assert ds.meta.total_frames == local.meta.total_frames and stats.keys() == local.stats.keys()
    assert isinstance(ds.storage, ObjectStore) and ds.storage.name == "s3://bucket/ds"


def test_the_format_reader_reads_a_url_and_a_directory_through_one_interface(clean, converted):
    """`DatasetFiles` over a `DatasetStorage`: a local directory and an object store give
    the same info, episode table, tasks and verified records."""
    from jaxload.format.reader import DatasetFiles
    from jaxload.format.storage import DatasetStorage, LocalDirectory, RecordReader
    from jaxload.storage.object_store import open_storage

    options = RemoteOptions(retry=FAST_RETRY)
    url = open_storage("s3://bucket/ds", storage_options=clean.storage_options(), remote=options)
    local = open_storage(converted)
    assert isinstance(local, LocalDirectory) and isinstance(url, ObjectStore)
    assert isinstance(local, DatasetStorage) and isinstance(url, DatasetStorage)
    a, b = DatasetFiles(local), DatasetFiles(url)
    assert isinstance(a.readers, RecordReader) and isinstance(b.readers, RecordReader)
    assert a.info == b.info and a.tasks() == b.tasks()
    assert np.array_equal(a.episodes.length, b.episodes.length)
    records = range(a.info.shard_records[0])
    assert a.readers.read(0, records) == b.readers.read(0, records)
    assert url.read("meta/no_such_file.json") is None
    assert b.episodes.where(0).startswith("s3://bucket/ds/data/")


def test_byte_range_decoding_equals_arrayrecords_own_reader_for_every_record(converted):
    info = fmt.read_info(converted)
    for shard, count in enumerate(info.shard_records):
        path = converted / fmt.shard_path(shard)
        data = path.read_bytes()
        offsets = record_offsets(data, count)
        stored = np.fromfile(converted / fmt.offsets_path(shard), dtype="<u8")
        assert np.array_equal(offsets, stored)  # the converter's index is the file's
        reader = ArrayRecordReader(str(path), fmt.READER_OPTIONS)
        expected = reader.read(list(range(count)))
        reader.close()
        crossing = 0
        for i in range(count):
            begin, end = int(offsets[i]), int(offsets[i + 1])
            crossing += begin // 65536 != (end - 1) // 65536
            assert decode_chunk(data[begin:end], begin) == expected[i], f"record {i}"
        assert crossing > 0  # records interrupted by Riegeli block headers are covered


def test_wrong_byte_range_is_an_error_not_data(converted):
    data = (converted / fmt.shard_path(0)).read_bytes()
    offsets = record_offsets(data, fmt.read_info(converted).shard_records[0])
    begin, end = int(offsets[3]), int(offsets[4])
    with pytest.raises(CorruptRecordError):
        decode_chunk(data[begin + 1 : end], begin + 1)
    damaged = bytearray(data[begin:end])
    damaged[-3] ^= 0xFF
    try:
        payload = decode_chunk(bytes(damaged), begin)
    except CorruptRecordError:
        return
    info = fmt.read_info(converted)
    assert fmt.unseal_record(payload, info.records_key, 0, 3) is None


def test_a_chunk_that_declares_gigabytes_is_refused_before_it_is_inflated(converted):
    """A record that is a zstd bomb (a few bytes declaring 3 GiB) was inflated to its
    declared size, once per fetch thread, before its checksum could fail. What it declares
    is now checked against its stored size first (`chunks.max_decoded_size`), and zstd is
    never asked for more."""
    import tracemalloc

    data = (converted / fmt.shard_path(0)).read_bytes()
    offsets = record_offsets(data, fmt.read_info(converted).shard_records[0])
    begin = int(offsets[0])
    first = bytearray(data[begin : int(offsets[1])])  # a record's chunk (before a block header)
    first[32:40] = (3 << 30).to_bytes(8, "little")  # the chunk's decoded size: 3 GiB
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match=r"declares 3221225472 bytes"):
            decode_chunk(bytes(first), begin)
        assert tracemalloc.get_traced_memory()[1] < 64 << 20
    finally:
        tracemalloc.stop()


def test_remote_samples_are_bitwise_equal_to_local(converted, clean):
    local = jaxload.open(converted, delta_timestamps=WINDOWS)
    remote = _remote(clean)
    assert len(remote) == len(local) and remote.fingerprint == local.fingerprint
    positions = list(range(0, len(local), 3))
    for got, want in zip(remote[positions], local[positions], strict=True):
        assert _same(got, want)
    stats = remote.remote_store.stats()
    assert stats["records_fetched"] > 0 and stats["requests"] < stats["records_fetched"]


def test_loader_batches_and_resume_are_exact_against_local(converted, clean):
    kwargs = dict(
        global_batch_size=8,
        seed=5,
        delta_timestamps=WINDOWS,
        options=PipelineOptions(num_workers=0),
    )
    options = RemoteOptions(retry=FAST_RETRY, cache_bytes=400_000, lookahead=4)
    local, remote = _loaders(clean, converted, options, **kwargs)
    with local, remote:
        for _ in range(6):
            a, b = next(local), next(remote)
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        state = remote.get_state()
        expected = [next(local) for _ in range(3)]
        stats = remote.stats["s3://bucket/ds"]
        assert stats["cache_hits"] > 0  # fetched ahead: the reads found their records
        assert stats["cache_bytes"] <= 400_000  # the budget holds
        # Its readers wait on the network at times: one more read thread than local.
        assert remote.options.read_threads == local.options.read_threads + 1
    restored = jaxload.make_loader(
        "s3://bucket/ds", storage_options=clean.storage_options(), **kwargs
    )
    restored.set_state(state)
    with restored:
        for want in expected:
            got = next(restored)
            assert all(np.array_equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize("cache_bytes", [20_000, 512 << 20])
def test_a_cache_of_under_three_batches_is_said_to_be_too_small_once(
    converted, clean, caplog, cache_bytes
):
    kwargs = dict(
        global_batch_size=8,
        seed=5,
        delta_timestamps=WINDOWS,
        options=PipelineOptions(num_workers=0),
    )
    options = RemoteOptions(retry=FAST_RETRY, cache_bytes=cache_bytes)
    local, remote = _loaders(clean, converted, options, **kwargs)
    with local, remote, caplog.at_level(logging.WARNING, logger="jaxload.storage"):
        for _ in range(4):
            a, b = next(local), next(remote)
            assert all(np.array_equal(a[k], b[k]) for k in a)  # small or not, the same data
    said = [r.getMessage() for r in caplog.records if "batches of the records" in r.getMessage()]
    if cache_bytes > 100_000:
        assert said == []
    else:
        (line,) = said
        assert line.startswith(
            "s3://bucket/ds: the cache (cache_bytes=20000, per process) holds 0."
        )
        assert "RemoteOptions(cache_bytes=" in line


def test_a_loader_reads_on_after_an_outage_that_outlasted_its_retries(converted, clean):
    kwargs = dict(
        global_batch_size=8,
        seed=3,
        delta_timestamps=WINDOWS,
        options=PipelineOptions(num_workers=0),
    )
    options = RemoteOptions(retry=FAST_RETRY, cache_bytes=20_000, lookahead=1)
    local, remote = _loaders(clean, converted, options, **kwargs)
    with local, remote:
        want = [next(local) for _ in range(40)]
        assert _same(next(remote), want[0])
        clean.set(fail={"match": "/data/shard-", "status": 500, "count": 1_000_000})
        failed_at = None
        for k in range(1, 40):  # batches read ahead before the outage still arrive
            try:
                assert _same(next(remote), want[k])
            except jaxload.RemoteError as e:  # the class a trainer catches
                assert e.kind == "transient" and "s3://bucket/ds/data/shard-" in str(e)
                # Nothing of the dropped pipeline stays in flight: the next one would wait
                # on it and could raise this error again after the outage ended.
                assert not remote.datasets[0].remote_store._inflight
                failed_at = k
                break
        assert failed_at is not None
        clean.set(fail=None)  # the outage ends: the same loader goes on where it stopped
        for k in range(failed_at, failed_at + 4):
            assert _same(next(remote), want[k])


def test_local_state_restores_on_the_remote_copy(converted, clean):
    kwargs = dict(global_batch_size=4, seed=1, options=PipelineOptions(num_workers=0))
    with jaxload.make_loader(converted, **kwargs) as local:
        next(local)
        state = local.get_state()
        want = next(local)
    remote = jaxload.make_loader(
        "s3://bucket/ds", storage_options=clean.storage_options(), **kwargs
    )
    remote.set_state(state)
    with remote:
        got = next(remote)
    assert all(np.array_equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize("signed", [True, False], ids=["signed-urls", "fsspec"])
def test_transient_faults_are_retried_and_the_data_is_unchanged(converted, clean, signed):
    local = jaxload.open(converted, delta_timestamps=WINDOWS)
    remote = _remote(clean, signed_urls=signed)
    clean.reset_counters()
    # 503 SlowDown on the shard's next requests (fewer than FAST_RETRY's attempts).
    clean.set(fail={"match": "shard-00000.array_record", "status": 503, "count": 3})
    for got, want in zip(remote[[0, 50, 100]], local[[0, 50, 100]], strict=True):
        assert _same(got, want)
    assert clean.counters()["requests"] >= 3
    assert remote.remote_store.stats()["transport"] == ("signed" if signed else "fsspec")
    assert remote.remote_store.stats()["retries"] == 3  # one per injected fault


def test_missing_object_fails_fast_naming_its_url(converted, clean, tmp_path):
    copy = tmp_path / "ds"
    shutil.copytree(converted, copy)
    clean.upload(str(copy), "s3://bucket/broken")
    clean.filesystem().rm("bucket/broken/data/shard-00000.array_record")
    remote = _remote(clean, "s3://bucket/broken")
    clean.reset_counters()
    with pytest.raises(JaxloadError, match=r"s3://bucket/broken/data/shard-00000\.array_record"):
        remote[0]
    # info.json, the offsets, 2 to check presigned URLs, 1 for the shard: no retries for a
    # 404 (FAST_RETRY would add 3)
    assert clean.counters()["requests"] <= 6


def test_missing_dataset_fails_fast_naming_its_url(clean):
    with pytest.raises(JaxloadError, match=r"s3://bucket/nothing-here/meta/info\.json: missing"):
        jaxload.open("s3://bucket/nothing-here", storage_options=clean.storage_options())


def test_corrupt_object_in_storage_is_a_checksum_error_naming_it(converted, clean, tmp_path):
    copy = tmp_path / "ds"
    shutil.copytree(converted, copy)
    shard = copy / fmt.shard_path(0)
    offsets = record_offsets(shard.read_bytes(), fmt.read_info(copy).shard_records[0])
    data = bytearray(shard.read_bytes())
    data[int(offsets[0]) + 60] ^= 0x55  # inside record 0's compressed payload
    shard.write_bytes(bytes(data))
    clean.upload(str(copy), "s3://bucket/corrupt")
    remote = _remote(clean, "s3://bucket/corrupt")
    with pytest.raises(CorruptRecordError, match=r"s3://bucket/corrupt/data/shard-00000"):
        remote[0]


@pytest.mark.parametrize("signed", [None, False])
def test_a_truncated_object_in_storage_is_an_error_naming_it(converted, clean, tmp_path, signed):
    copy = tmp_path / "ds"
    shutil.copytree(converted, copy)
    shard = copy / fmt.shard_path(0)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 3])
    clean.upload(str(copy), "s3://bucket/short")
    remote = _remote(clean, "s3://bucket/short", signed_urls=signed)
    with pytest.raises(CorruptRecordError) as short:
        remote[[len(remote) - 1]]
    text = str(short.value)
    assert "s3://bucket/short/data/shard-00000" in text and "shorter than its index" in text
    assert text.endswith("(dataset s3://bucket/short); upload it again")


def test_a_dataset_replaced_by_a_shorter_one_is_said_to_have_changed(converted, clean, tmp_path):
    from jaxload.errors import DatasetChangedError

    clean.upload(str(converted), "s3://bucket/replaced")
    remote = _remote(clean, "s3://bucket/replaced")
    remote.remote_store.load_offsets([0])  # the opened dataset's index
    other = tmp_path / "other"
    shutil.copytree(converted, other)
    info = json.loads((other / fmt.INFO_PATH).read_text())
    info["fingerprint"] = "f" * len(info["fingerprint"])
    (other / fmt.INFO_PATH).write_text(json.dumps(info))
    shard = other / fmt.shard_path(0)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 3])
    clean.upload(str(other), "s3://bucket/replaced")
    with pytest.raises(DatasetChangedError, match="another version than the one opened"):
        remote[[len(remote) - 1]]


def test_older_format_is_refused_remotely_with_a_clear_message(converted, clean, tmp_path):
    copy = tmp_path / "ds"
    shutil.copytree(converted, copy)
    info = json.loads((copy / fmt.INFO_PATH).read_text())
    info["format_version"] = 4  # records keyed by the source's metadata, not the content
    (copy / fmt.INFO_PATH).write_text(json.dumps(info))
    clean.upload(str(copy), "s3://bucket/v4")
    with pytest.raises(DatasetError, match=r"format_version 4 was written by an older"):
        jaxload.open(copy)
    with pytest.raises(DatasetError, match=r"format_version 4 .*reconvert the source"):
        jaxload.open("s3://bucket/v4", storage_options=clean.storage_options())


def test_progress_is_logged_with_the_hit_rate(converted, clean, caplog):
    remote = _remote(clean, log_every_s=1e-9)
    with caplog.at_level(logging.INFO, logger="jaxload.storage"):
        remote[[1, 2]]
        remote[[1, 2]]
    assert any("cache hit rate" in r.getMessage() for r in caplog.records)


def test_a_cache_as_large_as_the_dataset_fetches_it_about_once(converted, clean):
    # A merged request brings records between the ones asked for; with room in the cache
    # they stay (verified like the others). Before, they were dropped and fetched again by
    # later windows: over 2x the dataset's bytes over this epoch, 3x on a larger one.
    info = fmt.read_info(converted)
    dataset_bytes = sum(
        (converted / fmt.shard_path(s)).stat().st_size for s in range(info.num_shards)
    )
    kwargs = dict(
        global_batch_size=8,
        seed=2,
        delta_timestamps=WINDOWS,
        options=PipelineOptions(num_workers=0),
    )
    options = RemoteOptions(retry=FAST_RETRY, cache_bytes=2 * dataset_bytes, log_every_s=0)
    local, remote = _loaders(clean, converted, options, **kwargs)
    with local, remote:
        for _ in range(local.epoch_size // 8):
            a, b = next(local), next(remote)
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        stats = remote.stats["s3://bucket/ds"]
    assert stats["bytes_fetched"] < 1.1 * dataset_bytes, stats
    assert stats["cache_evictions"] == 0


def test_the_sweep_lengthens_while_the_cache_has_room_and_shortens_after_an_early_eviction(
    clean,
):
    store = _remote(clean, cache_bytes=1000).remote_store
    lead, window = store.lookahead(0.01, 100.0)  # 8 batches of records fit in 80%
    # Latency 50 ms (the estimate before any request), 10 ms a batch: a lead of 1.3
    # latencies (7 batches; half the cache, 4, would leave records arriving late), and
    # a period of 2 * 8 - 2 * 2: a record is cached for the lead less its 5 batches in
    # flight, plus P / 2.
    assert (lead, window) == (7, 19)
    for _ in range(window):  # a whole window in which nothing waited in the cache
        store.lookahead(0.01, 100.0)
    assert store.lookahead(0.01, 100.0) == (7, 20)
    for i in range(11):  # records a far batch reads, more than the budget holds
        store.cache.plan(("x", i), 10**6)
        store.cache.put(("x", i), b"x" * 100)
    assert store.cache.early_evictions == 1
    assert store.lookahead(0.01, 100.0) == (7, 7 + 13 * 3 // 4)
    for _ in range(20):  # the cache stays full: no longer again
        store.lookahead(0.01, 100.0)
    assert store.lookahead(0.01, 100.0) == (7, 16)
    # A slower reader (100 ms a batch): three latencies and a batch, as half the cache holds.
    assert _remote(clean, cache_bytes=1000).remote_store.lookahead(0.1, 100.0)[0] == 3


def test_the_sweep_is_no_longer_than_two_reads_of_the_dataset(clean):
    # A cache far larger than the dataset made the window 1,024 batches: a second of
    # planning before the second batch, for no byte saved (such a cache keeps all it gets).
    store = _remote(clean, cache_bytes=1 << 30).remote_store
    shards = range(store.info.num_shards)
    store.load_offsets(shards)
    dataset_bytes = sum(int(store.offsets.of(s)[-1]) for s in shards)
    lead, window = store.lookahead(0.01, dataset_bytes / 10)  # a batch reads a tenth of it
    assert window - lead == 20 and store.stats()["sweep_period"] == 20


def _within(seconds: float, read):
    """read() run in a thread that must finish within `seconds` (a hang fails the test)."""
    out = []
    thread = threading.Thread(target=lambda: out.append(read()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the read hung for {seconds} s"
    return out[0]


def test_a_cache_dir_that_cannot_be_written_neither_hangs_nor_changes_a_read(
    converted, clean, tmp_path, caplog
):
    local = jaxload.open(converted, delta_timestamps=WINDOWS)
    remote = _remote(clean, cache_dir=str(tmp_path / "cache"))
    assert _same(remote[0], local[0])  # makes this process's cache directory
    directory = remote.remote_store.cache._data.directory
    shutil.rmtree(directory)
    with open(directory, "wb"):  # a file where it was: every write fails (as on a full disk)
        pass
    with caplog.at_level(logging.WARNING, logger="jaxload.storage"):
        got = _within(60, lambda: [remote[i] for i in (5, 9, 13)])
    assert all(_same(g, local[i]) for g, i in zip(got, (5, 9, 13), strict=True))
    assert any("cannot cache records" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_cache_dir_that_cannot_be_a_directory_is_refused_when_opened(clean, tmp_path, where):
    # before: one warning, then every record fetched again for each use (30x the bytes)
    afile = tmp_path / "afile"
    afile.write_bytes(b"the user's")
    cache_dir = afile if where == "a file" else afile / "cache"
    with pytest.raises(ValueError, match=f"cache_dir='{cache_dir}'"):
        _remote(clean, cache_dir=str(cache_dir))
    assert afile.read_bytes() == b"the user's"


def test_a_cache_directory_removed_under_a_reader_is_made_again(converted, clean, tmp_path):
    local = jaxload.open(converted, delta_timestamps=WINDOWS)
    remote = _remote(clean, cache_dir=str(tmp_path / "cache"))
    assert _same(remote[0], local[0])
    cache = remote.remote_store.cache
    shutil.rmtree(cache._data.directory)  # e.g. a /tmp cleaner
    before = len(cache)
    assert all(_same(_within(60, lambda i=i: remote[i]), local[i]) for i in (5, 9, 13))
    assert len(cache) > before and os.path.isdir(cache._data.directory)
    directory = cache._data.directory
    remote.remote_store.close()  # what loader.close() does: the files go with the cache
    assert not os.path.exists(directory) and len(cache) == 0


def test_a_request_that_cannot_start_leaves_no_record_in_flight(clean):
    store = _remote(clean).remote_store
    store.load_offsets([0])
    store.pool().shutdown()  # as at interpreter exit: the pool takes no new work
    with pytest.raises(RuntimeError, match="cannot schedule"):
        store.fetch([(0, 1), (0, 2)])
    # Before, the two stayed "in flight" for good: a later read of either waited forever.
    assert not store._inflight


def test_worker_processes_read_remote_batches_equal_to_local(converted, clean, tmp_path, caplog):
    kwargs = dict(global_batch_size=8, seed=2, delta_timestamps=WINDOWS)
    with jaxload.make_loader(converted, options=PipelineOptions(num_workers=0), **kwargs) as local:
        want = [next(local) for _ in range(4)]
    cache_dir = tmp_path / "cache"
    remote = jaxload.make_loader(
        "s3://bucket/ds",
        storage_options=clean.storage_options(),
        options=PipelineOptions(num_workers=2),
        # a small cache: the workers fetch for each batch, also while the test waits
        remote=RemoteOptions(cache_dir=str(cache_dir), cache_bytes=300_000, log_every_s=1e-9),
        **kwargs,
    )
    clean.reset_counters()  # from here on, only the workers' stores send requests
    with remote, caplog.at_level(logging.INFO, logger="jaxload.storage"):
        for a in want:
            b = next(remote)
            assert all(np.array_equal(a[k], b[k]) for k in a)
        # Every request the workers sent is counted in loader.stats within a second or so,
        # also once they read nothing more (their output buffers full): before, a worker
        # published only after a read, and its last second of requests never arrived.
        # (Each process also checks a presigned GET against fsspec once: 2 requests.)
        stats = _eventually(10, lambda: _settled(clean, remote))
        assert stats["processes"] == 2 and stats["retries"] == 0
        # The main process logs progress for its workers (whose own lines went nowhere).
        # caplog sees this process's records only: a line counting fetches is the workers'
        lines = [r.getMessage() for r in caplog.records if "cache hit rate" in r.getMessage()]
        fetched = [int(re.search(r"for (\d+) records", line)[1]) for line in lines]
        assert fetched and max(fetched) > 0
        # The workers fetched; their counters reach the main process's loader.stats.
        stats = remote.stats["s3://bucket/ds"]
        assert 1 <= stats["processes"] <= 2 and stats["records_fetched"] > 0
        assert stats["transport"] == "signed"
        assert remote.options.read_threads == 2  # no extra thread with a disk cache
        # Only the reading processes made cache directories, the main one none.
        owners = {int(d.name.split("-")[2].split("@")[0]) for d in cache_dir.iterdir()}
        assert owners and os.getpid() not in owners


def _eventually(seconds: float, check):
    """check()'s first result that is not None, within `seconds` (else the test fails)."""
    deadline = time.monotonic() + seconds
    while (found := check()) is None:
        assert time.monotonic() < deadline, f"not within {seconds} s"
    return found


def _settled(server, loader) -> dict | None:
    """loader.stats, once it counts every request the server answered (else None)."""
    served = server.counters()["requests"]
    time.sleep(0.3)
    stats = loader.stats["s3://bucket/ds"]
    probes = 2 * stats["processes"]  # `open_ranges`'s check, made outside the counters
    return stats if served == server.counters()["requests"] == stats["requests"] + probes else None


def test_close_fails_fetches_in_flight_and_a_later_read_works(converted, clean):
    local = jaxload.open(converted, delta_timestamps=WINDOWS)
    remote = _remote(clean)
    store = remote.remote_store
    store.load_offsets([0])
    clean.set(latency_s=0.5)
    flights = store.fetch([(0, r) for r in range(4)])
    store.close()
    for key, flight in flights.items():
        with pytest.raises(DatasetError, match="closed while this record was being fetched"):
            flight.result(key, timeout=5)
    clean.set(latency_s=0.02)
    assert _same(local[3], remote[3])


def test_a_fetch_that_lands_as_close_runs_leaves_nothing_cached(clean, tmp_path, monkeypatch):
    # close() between a request's bookkeeping and its store: before, the records were cached
    # after close() had emptied the cache, and a cache_dir it had removed was made again
    cache_dir = tmp_path / "cache"
    store = _remote(clean, cache_dir=str(cache_dir)).remote_store
    store.load_offsets([0])
    keep, landed = store._keep, threading.Event()

    def close_first(*args):
        store.close()
        keep(*args)
        landed.set()

    monkeypatch.setattr(store, "_keep", close_first)
    store.fetch([(0, r) for r in range(4)])
    assert landed.wait(30)
    assert len(store.cache) == 0 and not (cache_dir.exists() and any(cache_dir.iterdir()))


def test_a_pipeline_whose_loader_was_closed_fetches_nothing_more(converted, clean):
    # A read thread can still be inside a batch when loader.close() returns. Before, it
    # went on planning and fetching (through a new pool): against a store that was gone
    # by then, retry warnings and seconds of delay at exit.
    loader = jaxload.make_loader(
        "s3://bucket/ds",
        global_batch_size=4,
        delta_timestamps=WINDOWS,
        storage_options=clean.storage_options(),
        remote=RemoteOptions(retry=FAST_RETRY, log_every_s=0),
    )
    read = loader.read_batch()  # the transform the pipeline's threads run, batch by batch
    local = jaxload.make_loader(converted, global_batch_size=4, delta_timestamps=WINDOWS)
    first = read.map(0)
    assert _same(first, next(local))
    loader.close()  # closes the store, as when the pipeline's threads are still running
    clean.reset_counters()
    with pytest.raises(DatasetError, match="loader reading this was closed"):
        read.map(1)
    assert clean.counters()["requests"] == 0
    # A pipeline started after the close reads on.
    assert _same(loader.read_batch().map(1), next(local))


def test_a_restarted_store_fetches_anew_instead_of_waiting_on_an_old_request(converted, clean):
    store = _remote(clean).remote_store
    want = _remote(clean).remote_store.read(0, [3])[0]
    store.load_offsets([0])
    clean.set(latency_s=1.0)
    old = store.fetch([(0, 3)])[(0, 3)]  # a request of a pipeline the loader drops
    store.restart()
    with pytest.raises(DatasetError, match="closed while this record was being fetched"):
        old.result((0, 3), timeout=5)
    clean.set(latency_s=0.02)
    clean.reset_counters()
    assert _within(30, lambda: store.read(0, [3]))[0] == want
    assert clean.counters()["requests"] == 1  # its own request, not the dropped one


def test_remote_options_may_be_a_dict_and_a_wrong_name_is_said(converted, clean):
    ds = jaxload.open(
        "s3://bucket/ds",
        delta_timestamps=WINDOWS,
        storage_options=clean.storage_options(),
        remote={"cache_bytes": 100_000, "retry": FAST_RETRY},
    )
    assert ds.remote_store.options.cache_bytes == 100_000
    assert _same(ds[2], jaxload.open(converted, delta_timestamps=WINDOWS)[2])
    with pytest.raises(TypeError, match=r"unknown RemoteOptions field.*cache_byte.*cache_bytes"):
        jaxload.open(
            "s3://bucket/ds", storage_options=clean.storage_options(), remote={"cache_byte": 1}
        )


def test_retries_of_one_dataset_warn_once_per_window_and_count_the_rest(clean, caplog):
    # In an outage every range in flight retries: one warning line per range, ~20 at once.
    transport = _remote(clean).remote_store.transport
    with caplog.at_level(logging.DEBUG, logger="jaxload.storage"):
        for i in range(5):
            transport._warn_retry("%s: down; retry %d", "s3://bucket/ds/x", i)
        transport._retry_quiet_until = 0.0  # the window is over
        transport._warn_retry("%s: down; retry %d", "s3://bucket/ds/x", 5)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "s3://bucket/ds/x: down; retry 0",
        "s3://bucket/ds/x: down; retry 5 (4 more retries of its requests before this one)",
    ]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) >= 4


def test_disk_cache_serves_verified_records_and_refetches_a_damaged_file(
    converted, clean, tmp_path, caplog
):
    local = jaxload.open(converted, delta_timestamps=WINDOWS)
    cache_dir = tmp_path / "cache"
    remote = _remote(clean, cache_dir=str(cache_dir))
    positions = [0, 5, 9]
    assert all(_same(local[p], remote[p]) for p in positions)
    (directory,) = cache_dir.iterdir()  # this process's own
    files = [f for f in directory.iterdir() if f.name != ".owner"]  # .owner: its lock
    assert files and remote.remote_store.stats()["cache_records"] == len(files)
    for f in files:  # damage every cached record on disk
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0xFF
        f.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="jaxload.storage"):
        assert all(_same(local[p], remote[p]) for p in positions)
    # said once, not once per file (a damaged disk gave 700 lines); the rest counted
    assert sum("changed on disk" in r.getMessage() for r in caplog.records) == 1
    assert 1 < remote.remote_store.stats()["cache_damaged"] <= len(files)


def test_requests_merge_across_small_gaps_and_split_at_the_size_limit(clean):
    store = _remote(clean, coalesce_bytes=0, max_request_bytes=1).remote_store
    store.load_offsets([0])
    offsets = store.offsets.of(0)

    def options(**fields):  # the store's and its transport's (which sizes the gap)
        store.options = store.transport.options = RemoteOptions(**fields)

    # No gap allowed: adjacent records merge, a skipped record splits; 1 byte: one each.
    assert [r[3] for r in store._requests([(0, 1), (0, 2), (0, 4)])] == [[1], [2], [4]]
    options(coalesce_bytes=0)
    requests = store._requests([(0, 1), (0, 2), (0, 4)])
    assert [r[3] for r in requests] == [[1, 2], [4]]
    assert [r[1:3] for r in requests] == [
        (offsets[1], offsets[3]),
        (offsets[4], offsets[5]),
    ]
    # A gap of one record merges once allowed; the size limit then splits the run where
    # the next record would pass it.
    gap = int(offsets[4] - offsets[3])
    options(coalesce_bytes=gap)
    assert [r[3] for r in store._requests([(0, 1), (0, 2), (0, 4)])] == [[1, 2, 4]]
    options(coalesce_bytes=gap, max_request_bytes=int(offsets[4] - offsets[1]))
    assert [r[3] for r in store._requests([(0, 1), (0, 2), (0, 4)])] == [[1, 2], [4]]
    # Every record of every request is fetched, verified and equal to a plain read.
    assert store.read(0, [1, 2, 4]) == _remote(clean).remote_store.read(0, [1, 2, 4])


def test_a_cache_that_fails_to_store_a_record_neither_hangs_nor_changes_a_read(
    clean, monkeypatch, caplog
):
    # Fault injection: the cache's put fails as memory running out would. Before, a put
    # that raised anything but OSError skipped the end of the request's flight: every
    # reader of its records waited for ever, and so did later reads of them.
    store = _remote(clean).remote_store
    want = _remote(clean).remote_store.read(0, [1, 2, 3])

    def broken(records):
        raise MemoryError("no room")

    monkeypatch.setattr(store.cache, "put_many", broken)
    with caplog.at_level("WARNING", logger="jaxload.storage"):
        assert _within(30, lambda: store.read(0, [1, 2, 3])) == want
        assert _within(30, lambda: store.read(0, [1, 2, 3])) == want  # fetched again
    assert not store._inflight
    assert sum("cannot cache records" in r.getMessage() for r in caplog.records) == 1


def test_remote_options_given_for_a_local_read_are_said_to_be_ignored(converted, caplog):
    # A config written for a bucket, pointed at a local copy: the options do nothing there,
    # and the user is told so rather than left to think a cache budget applies.
    with caplog.at_level(logging.WARNING, logger="jaxload.storage"):
        jaxload.open(converted)
        jaxload.make_loader(converted, global_batch_size=4, seed=0).close()
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="jaxload.storage"):
        jaxload.open(converted, storage_options={"anon": True})
        loader = jaxload.make_loader(
            converted, global_batch_size=4, seed=0, remote=RemoteOptions(cache_bytes=1 << 20)
        )
        next(loader)
        loader.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and all("local read ignores them" in m for m in said)
    assert "storage_options" in said[0] and "remote" in said[1] and str(converted) in said[1]


def test_no_secret_reaches_a_message_of_a_failing_remote_run(clean, caplog):
    """Credentials in storage_options and in a URL's userinfo are never printed: not in a
    repr, an exception's message or a log line, whatever fails (a store answering 500s, a
    host that refuses). Before: `repr(DatasetSource(...))` printed key and secret, and a
    URL's password appeared in exceptions and four log lines."""
    secret, password = "PLANTED-SECRET-4c1d9", "PLANTED-PW-77e2a"
    options = clean.storage_options() | {"secret": secret}
    runs = [
        ("s3://bucket/ds", options),  # every request answered 500
        (f"http://reader:{password}@127.0.0.1:9/ds", None),  # nobody listens there
    ]
    messages = []
    clean.set(fail={"match": "/ds/", "status": 500, "count": 10**6})
    try:
        with caplog.at_level(logging.DEBUG):
            for url, storage_options in runs:
                source = jaxload.DatasetSource(url, storage_options=storage_options)
                messages += [repr(source), source.name]
                for attempt in (jaxload.open, _loader_of):
                    try:
                        attempt(url, storage_options)
                    except Exception as e:  # what a user sees, the whole chain's text
                        while e is not None:
                            messages += [str(e), repr(e)]
                            e = e.__cause__ or e.__context__
    finally:
        clean.set(fail=None)
    # jaxload's own log lines (fsspec's DEBUG lines print the URLs it is given)
    messages += [r.getMessage() for r in caplog.records if r.name.startswith("jaxload")]
    leaked = [m for m in messages if secret in m or password in m]
    assert leaked == [], leaked[:3]
    assert any("reader" not in m and "***@127.0.0.1" in m for m in messages)


def _loader_of(url, storage_options):
    return jaxload.make_loader(
        url,
        global_batch_size=2,
        storage_options=storage_options,
        remote=RemoteOptions(retry=FAST_RETRY),
        options=jaxload.PipelineOptions(num_workers=0),
    )
