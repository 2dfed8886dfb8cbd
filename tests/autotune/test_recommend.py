"""jaxload autotune: measurements of this machine and a dataset, and the settings they give."""

import ast
import dataclasses
import inspect
import json
import logging
import os
import types

import numpy as np
import pytest

import jaxload
import jaxload.autotune as A
from jaxload.cli import main
from jaxload.options import PipelineOptions
from jaxload.pipeline.make_loader import make_loader
from jaxload.placement import machine as M
from tests.support.helpers import converted

GiB = 2**30
WINDOWS = {"action": [k / 10 for k in range(8)], "observation.image": [-0.1, 0.0]}


@pytest.fixture(scope="module")
def dataset(shared_lerobot, tmp_path_factory):
    return converted(tmp_path_factory, shared_lerobot / "h264_single")


@pytest.fixture(scope="module")
def probe(dataset):
    return A.probe_dataset(dataset, delta_timestamps=WINDOWS)


def test_recommendation_on_this_machine(dataset, capsys):
    rec = A.recommend(dataset, delta_timestamps=WINDOWS)
    with capsys.disabled():  # shown in the test output, as the issue asks
        print(f"\n--- jaxload autotune on this machine ---\n{rec.summary()}\n")
    machine = rec.machine
    assert machine.cpu_count == len(os.sched_getaffinity(0))
    assert 0 < machine.memory_available <= machine.memory_total
    assert 0 <= rec.num_workers <= machine.cpu_count and rec.read_threads >= 1
    if not machine.gpus:
        assert rec.decode_device == "cpu" and any("no GPU" in r for r in rec.reasons)
    (probe,) = rec.datasets
    camera = probe.cameras["observation.image"]
    assert camera.codec == "h264" and (camera.height, camera.width) == (84, 84)
    assert camera.decode_ms_per_frame > 0 and camera.decode_ms_random > 0
    assert camera.frames_per_sample == 2 and camera.segment_bytes > 0
    assert probe.sample_ms > 0 and probe.frame_record_bytes == 68
    spec = jaxload.open(dataset, delta_timestamps=WINDOWS).element_spec()
    assert probe.sample_bytes == sum(
        int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize for s in spec.values()
    )
    assert probe.sample_bytes > 2 * 84 * 84 * 3  # two frames of the camera
    assert rec.batch_size_min <= rec.global_batch_size <= rec.batch_size_max
    assert rec.global_batch_size % rec.batch_size_min == 0

    # The paste-ready call is valid Python and builds this loader.
    call = rec.make_loader_call()
    ast.parse(call)
    # (jaxload.make_loader is the contract's name; jaxload/__init__ may not export it yet)
    namespace = types.SimpleNamespace(make_loader=make_loader, PipelineOptions=PipelineOptions)
    loader = eval(call, {"jaxload": namespace})  # our own generated text
    with loader:
        assert loader.options.num_workers == rec.num_workers
        assert loader.options.read_threads == rec.read_threads
        assert loader.global_batch_size == rec.global_batch_size
    inspect.signature(make_loader).bind(dataset, global_batch_size=8, **rec.loader_kwargs())


def _gpu_machine(gpu: M.GpuInfo, count: int = 8, **kwargs) -> M.MachineInfo:
    return M.MachineInfo(
        cpu_count=96,
        memory_total=1024 * GiB,
        memory_available=900 * GiB,
        gpus=(gpu,) * count,
        torchcodec_cuda=True,
        process_rss=2 * GiB,
        **kwargs,
    )


H100 = M.GpuInfo("NVIDIA H100 80GB HBM3", 80 * GiB, (9, 0))
L4 = M.GpuInfo("NVIDIA L4", 24 * GiB, (8, 9))


def test_simulated_gpu_inventory(probe, capsys):
    rec = A.recommend([], machine=_gpu_machine(H100), probes=[probe], decode_devices=("cuda",))
    with capsys.disabled():
        print(f"\n--- simulated 8 x H100 host ---\n{rec.summary()}\n")
    assert rec.decode_device == "cuda"  # h264: NVDEC decodes it
    # 84 cores (1/8 stay with the trainer): 8 workers (the cap) sharing them as threads
    assert (rec.num_workers, rec.read_threads) == (8, 11)
    assert rec.batch_size_min == 8 and rec.batch_size_max % 8 == 0
    gpu_bound = 8 * int(0.05 * 80 * GiB // (3 * probe.sample_bytes))  # 5%, 3 batches each
    in_flight = rec.num_workers * rec.worker_buffer_size + rec.prefetch + 2
    host_bound = int(0.25 * 900 * GiB // (in_flight * probe.sample_bytes))
    assert rec.batch_size_max == min(gpu_bound, host_bound) // 8 * 8
    assert "jaxload.make_loader(" in rec.make_loader_call()
    assert "decode_device='cuda'" in rec.make_loader_call()

    # Four such hosts: the global batch is a multiple of 32 devices.
    four = A.recommend([], machine=_gpu_machine(H100), probes=[probe], host_count=4)
    assert four.batch_size_min == 32 and four.global_batch_size % 32 == 0
    # A loader that can decode on both sides: which is faster is measured, not guessed.
    assert four.decode_device == "auto" and "decode_device='auto'" in four.make_loader_call()
    assert any("times the CPU readers and the devices" in r for r in four.reasons)
    # A loader that could only decode on the CPU: the recommendation says so.
    cpu_only = A.recommend([], machine=_gpu_machine(H100), probes=[probe], decode_devices=("cpu",))
    assert cpu_only.decode_device == "cpu"
    assert any("this loader decodes on ['cpu']" in r for r in cpu_only.reasons)


def test_av1_needs_an_nvdec_that_decodes_it(probe):
    camera = dataclasses.replace(probe.cameras["observation.image"], codec="av1")
    av1 = dataclasses.replace(probe, cameras={"observation.image": camera})
    devices = ("cuda",)  # the loader's choice without "auto"'s measurement
    on_h100 = A.recommend([], machine=_gpu_machine(H100), probes=[av1], decode_devices=devices)
    assert on_h100.decode_device == "cpu"
    assert any("NVDEC cannot decode" in r and "Hopper" in r for r in on_h100.reasons)
    on_l4 = A.recommend([], machine=_gpu_machine(L4, 4), probes=[av1], decode_devices=devices)
    assert on_l4.decode_device == "cuda"
    no_cuda_decode = _gpu_machine(L4, 4, notes=("simulated",))
    no_cuda_decode = dataclasses.replace(no_cuda_decode, torchcodec_cuda=False)
    rec = A.recommend([], machine=no_cuda_decode, probes=[av1], decode_devices=devices)
    assert rec.decode_device == "cpu" and any("torchcodec" in r for r in rec.reasons)


def test_small_hosts_and_memory_pressure(probe):
    tight = M.MachineInfo(
        cpu_count=16, memory_total=8 * GiB, memory_available=3 * GiB, process_rss=1 * GiB
    )
    rec = A.recommend([], machine=tight, probes=[probe])
    assert rec.num_workers == 1  # 50% of 3 GiB / 1 GiB per worker
    assert rec.read_threads == 8  # the 8 loading cores go to its threads
    assert any("memory" in r for r in rec.reasons)
    wanted = A.recommend(
        [],
        machine=dataclasses.replace(tight, memory_available=64 * GiB),
        probes=[probe],
        target_samples_per_s=1000 / probe.sample_ms,  # one worker's worth
    )
    # 2 cores (25% headroom): threads in the training process, no worker processes
    assert (wanted.num_workers, wanted.read_threads) == (0, 2)


def test_cli_prints_a_recommendation_and_json(dataset, capsys):
    assert main(["autotune", str(dataset), "--delta-timestamps", json.dumps(WINDOWS)]) == 0
    out = capsys.readouterr().out
    assert "recommended: num_workers=" in out and "jaxload.make_loader(" in out
    assert "ms/frame" in out
    assert main(["autotune", str(dataset), "--json"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert {"num_workers", "read_threads", "prefetch", "decode_device", "machine"} <= set(raw)


def test_tuned_loader_kwargs_keep_explicit_settings_and_log_the_choice(dataset, caplog):
    with caplog.at_level(logging.INFO, logger="jaxload.autotune.recommend"):
        kwargs = A.tuned_loader_kwargs(
            [jaxload.open(dataset)], overrides={"prefetch": 7, "num_workers": None}
        )
    assert kwargs["prefetch"] == 7 and kwargs["num_workers"] >= 0
    assert set(kwargs) == {
        "num_workers",
        "read_threads",
        "worker_buffer_size",
        "prefetch",
        "decode_device",
    }
    (record,) = caplog.records
    assert "autotune: num_workers=" in record.getMessage() and "['prefetch']" in record.getMessage()
    loader = make_loader(dataset, global_batch_size=4, options=PipelineOptions(**kwargs))
    loader.close()


def _probe(path: str, cameras: dict | None = None, sample_ms: float = 2.0, frames: int = 1000):
    """A dataset's measurements as `probe_dataset` states them (planning for another host)."""
    return A.DatasetProbe(path=path, frames=frames, episodes=10, frame_record_bytes=64,
                          sample_bytes=64 * 1024, sample_ms=sample_ms,
                          cameras=cameras or {})  # fmt: skip


def _camera(codec: str = "h264") -> A.CameraProbe:
    return A.CameraProbe(codec=codec, height=96, width=128, segment_bytes=4096.0,
                         frames_per_segment=2.0, decode_ms_per_frame=0.5, decode_ms_random=1.0,
                         frames_per_sample=2, segments_measured=8)  # fmt: skip


CPU_HOST = M.MachineInfo(cpu_count=16, memory_total=64 * GiB, memory_available=48 * GiB,
                         process_rss=1 * GiB)  # fmt: skip


def test_tabular_data_gets_at_most_two_cores_and_a_mixture_is_weighed_by_frames():
    tabular = A.recommend([], machine=CPU_HOST, probes=[_probe("/a"), _probe("/b")])
    assert (tabular.num_workers, tabular.read_threads) == (0, 2)  # 2 cores: threads only
    assert any("no video: reading is cheap, at most 2 cores" in r for r in tabular.reasons)
    assert tabular.decode_device == "cpu"
    # 8 of 16 cores load (JAX computes on the CPU); samples/s from the frame-weighted cost
    mixed = A.recommend([], machine=CPU_HOST, probes=[
        _probe("/a", {"cam": _camera()}, sample_ms=1.0, frames=3000),
        _probe("/b", {"cam": _camera()}, sample_ms=5.0, frames=1000)])  # fmt: skip
    assert mixed.samples_per_s == pytest.approx(8 * 1000 / 2.0)  # (3 x 1 + 1 x 5) / 4 ms
    assert mixed.reasons[0].startswith("16 cores, 8 kept for the training process")


def test_a_target_above_what_the_cores_give_leaves_them_all():
    video = [_probe("/a", {"cam": _camera()}, sample_ms=10.0)]
    modest = A.recommend([], machine=CPU_HOST, probes=video, target_samples_per_s=100)
    assert any("100 samples/s wanted at 10.00 ms/sample: 2 cores" in r for r in modest.reasons)
    eager = A.recommend([], machine=CPU_HOST, probes=video, target_samples_per_s=10_000)
    plain = A.recommend([], machine=CPU_HOST, probes=video)
    assert (eager.num_workers, eager.read_threads) == (plain.num_workers, plain.read_threads)
    assert not any("wanted" in r for r in eager.reasons)


def test_no_memory_for_a_worker_process_leaves_the_threads():
    starved = dataclasses.replace(CPU_HOST, memory_available=1 * GiB)  # half: under one worker
    rec = A.recommend([], machine=starved, probes=[_probe("/a", {"cam": _camera()})])
    assert rec.num_workers == 0 and rec.read_threads == 8  # the 8 loading cores as threads
    assert any(r.startswith("memory: 1.0 GiB free") for r in rec.reasons)


def test_the_paste_ready_call_of_a_mixture_and_the_json():
    windows = {"action": [0.0, 0.1]}
    rec = A.recommend([], machine=CPU_HOST, probes=[_probe("/a"), _probe("/b")],
                      delta_timestamps=windows)  # fmt: skip
    call = rec.make_loader_call()
    ast.parse(call)
    assert call.splitlines()[1] == "    ['/a', '/b'],"
    assert f"    delta_timestamps={windows!r}," in call.splitlines()
    assert "options=jaxload.PipelineOptions(num_workers=0, read_threads=2, " in call
    raw = json.loads(json.dumps(rec.to_json()))
    assert raw["num_workers"] == 0 and [d["path"] for d in raw["datasets"]] == ["/a", "/b"]
    assert raw["reasons"] == list(rec.reasons) and raw["machine"]["cpu_count"] == 16
    summary = rec.summary()
    assert "machine: 16 cores, 48.0 of 64.0 GiB free, GPUs: none" in summary
    assert "dataset /a: 10 episodes, 1000 frames, 64 B tabular per frame" in summary
    assert summary.endswith(call)
