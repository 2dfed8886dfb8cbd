"""How worker processes start (jaxload.workers.fork_server): from a preloaded fork server,
because Grain spawns them whatever multiprocessing's start method says."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from jaxload import PipelineOptions, make_loader
from jaxload.converters.convert import convert
from jaxload.workers import fork_server
from jaxload.workers.processes import _processes, worker_pids

# Plain Grain, no jaxload: workers report their parent; the script sets "forkserver" as
# multiprocessing's start method first, the one public way to ask for it.
GRAIN_WORKERS_PARENT = textwrap.dedent(
    """
    import multiprocessing, os
    from absl import flags
    import grain
    def parent(_):
        return os.getppid()
    if __name__ == "__main__":
        flags.FLAGS.mark_as_parsed()
        multiprocessing.set_start_method("forkserver", force=True)
        ds = grain.MapDataset.range(4).map(parent).to_iter_dataset()
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
        print(os.getpid(), sorted(set(ds)))
    """
)


@pytest.mark.processes
def test_grain_spawns_its_workers_whatever_the_start_method_says(tmp_path):
    """The Grain limitation the fork server works around (grain 0.2.18): its workers are
    children of the trainer (spawned), not of a fork server, though the script asked for
    "forkserver". When a Grain release takes a start method, this fails: use its option
    and delete jaxload.workers.fork_server's lookup."""
    script = tmp_path / "grain_workers.py"
    script.write_text(GRAIN_WORKERS_PARENT)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=True
    ).stdout.split(maxsplit=1)
    trainer, parents = int(out[0]), eval(out[1])
    assert parents == [trainer]


@pytest.fixture(scope="module")
def h264_dataset(shared_lerobot, tmp_path_factory):
    out = tmp_path_factory.mktemp("fork_server") / "h264_single"
    convert(shared_lerobot / "h264_single", out, workers=1, progress=False)
    return out


@pytest.mark.processes
def test_workers_are_forked_by_the_preloaded_server_and_serve_the_same_batches(h264_dataset):
    kw = dict(global_batch_size=4, seed=3, shuffle=True, host_index=0, host_count=1)
    want = [next(make_loader(h264_dataset, options=PipelineOptions(num_workers=0), **kw))]
    earlier = set(worker_pids())
    with make_loader(h264_dataset, options=PipelineOptions(num_workers=2), **kw) as loader:
        got = [next(loader)]
        assert fork_server.worker_start_method() == "forkserver"
        mine = sorted(set(worker_pids()) - earlier)
        assert len(mine) == 2
        processes = _processes()
        (server,) = {processes[pid][0] for pid in mine}
        assert processes[server][0] == os.getpid()  # the trainer's child, the workers' parent
        assert b"multiprocessing.forkserver" in processes[server][2]
        # What the server imported once: the workers' modules and the decoder's library.
        for name in ("grain", "jaxload.stages.read_batch", fork_server.DECODER_PRELOAD):
            assert repr(name).encode() in processes[server][2]
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert (a[key] == b[key]).all(), key


def test_a_preload_that_cannot_be_found_is_an_error(monkeypatch):
    monkeypatch.setenv(fork_server.PRELOAD_ENV, "numpy, mypolicy_misspeled.layers")
    with pytest.raises(ValueError, match="JAXLOAD_WORKER_PRELOAD: no module 'mypolicy_misspeled"):
        fork_server.preload_modules(decodes_video=False)


def test_preload_lists_the_workers_modules_what_the_trainer_imported_and_the_decoder(
    monkeypatch,
):
    monkeypatch.delenv(fork_server.PRELOAD_ENV, raising=False)
    without_video = fork_server.preload_modules(decodes_video=False)
    assert set(fork_server.WORKER_MODULES) <= set(without_video)
    assert "jax" in without_video  # imported by this process (conftest), as by a trainer
    assert "flax" not in without_video  # never imported here: not added
    assert fork_server.DECODER_PRELOAD in fork_server.preload_modules(decodes_video=True)
    assert "torchcodec" not in fork_server.preload_modules(decodes_video=True)  # not plainly
    monkeypatch.setenv(fork_server.PRELOAD_ENV, " json.decoder, numpy ,")
    extra = fork_server.preload_modules(decodes_video=False)
    assert extra[-1] == "json.decoder" and extra.count("numpy") == 1


def test_the_start_method_is_chosen_by_environment(monkeypatch):
    monkeypatch.delenv(fork_server.START_ENV, raising=False)
    assert fork_server.enabled()
    monkeypatch.setenv(fork_server.START_ENV, "")  # set but empty: as unset
    assert fork_server.enabled()
    monkeypatch.setenv(fork_server.START_ENV, "spawn")
    assert not fork_server.enabled()
    assert fork_server.start_fork_server(decodes_video=False) is False
    monkeypatch.setenv(fork_server.START_ENV, "fork")
    with pytest.raises(ValueError, match="JAXLOAD_WORKER_START='fork'"):
        fork_server.enabled()


def test_only_grains_spawn_lookup_is_redirected():
    lookup = fork_server._ForkServerContextLookup()
    assert lookup.get_context("spawn").get_start_method() == "forkserver"
    assert lookup.get_context("fork").get_start_method() == "fork"
    import multiprocessing

    assert lookup.Queue is multiprocessing.Queue  # everything else is multiprocessing's
