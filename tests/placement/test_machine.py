"""What this host offers the loader (jaxload.placement.machine): cores under the cgroup's
CPU quota, memory under its limit, and GPUs from nvidia-smi with what their NVDEC decodes.

No GPU and no cgroup limit here: the cgroup files are given through the module's one file
reader (`_read`), and nvidia-smi is a real executable script on PATH that prints what the
real one prints.
"""

from __future__ import annotations

import os
import stat

import pytest

from jaxload.placement import machine as M

GiB = M.GiB


@pytest.mark.parametrize(
    ("name", "capability", "architecture"),
    [
        # The capability decides, whatever the name says.
        ("NVIDIA A100-SXM4-80GB", (9, 0), "Hopper"),
        ("NVIDIA Next Gen", (10, 0), "Blackwell"),  # any major >= 10, whatever the name
        ("NVIDIA RTX A6000", (8, 6), "Ampere GA10x"),
        # A capability not in the table: the name decides.
        ("NVIDIA H100 PCIe", (9, 9), "Hopper"),
        ("NVIDIA GH200 480GB", None, "Hopper"),
        ("NVIDIA B200", None, "Blackwell"),
        ("NVIDIA L40S", None, "Ada"),
        ("Tesla P100-PCIE-16GB", None, "Pascal"),
        ("nvidia a30", None, "Ampere GA100"),  # case does not matter
        ("Some Future GPU", (3, 5), "unknown"),
    ],
)
def test_the_architecture_comes_from_the_capability_else_the_name(name, capability, architecture):
    assert M.GpuInfo(name, 16 * GiB, capability).architecture == architecture


def test_only_architectures_whose_nvdec_decodes_av1_are_said_to():
    hopper = M.GpuInfo("NVIDIA H200", 141 * GiB, (9, 0))
    ada = M.GpuInfo("NVIDIA L4", 24 * GiB, (8, 9))
    unknown = M.GpuInfo("Some Future GPU", 8 * GiB)
    assert hopper.nvdec_codecs == {"h264", "hevc", "vp9"}
    assert ada.nvdec_codecs == set(M.CODECS)
    assert unknown.nvdec_codecs == {"h264"}  # every NVDEC decodes H.264, nothing more is sure


@pytest.mark.parametrize(
    ("name", "engines"),
    [
        ("NVIDIA H100 80GB HBM3", 7),
        ("NVIDIA B200", 7),
        ("NVIDIA A100-SXM4-80GB", 5),
        ("NVIDIA L4", 4),
        ("NVIDIA L40S", 3),
        ("NVIDIA A10G", 2),
        ("Some Future GPU", 2),  # not in the table
    ],
)
def test_nvdec_engines_per_gpu(name, engines):
    assert M.GpuInfo(name, 16 * GiB).nvdec_engines == engines


def test_nvidia_smi_lines_parse_with_and_without_a_capability():
    assert M._parse_smi_line("NVIDIA L4, 23034, 8.9") == M.GpuInfo(
        "NVIDIA L4", 23034 * 2**20, (8, 9)
    )
    # An old driver answers the capability field with "[N/A]": no capability, the name decides.
    old = M._parse_smi_line("Tesla T4, 15360, [N/A]")
    assert old.compute_capability is None and old.architecture == "Turing"
    assert old.memory_bytes == 15360 * 2**20


@pytest.mark.parametrize(
    ("name", "capability", "architecture", "av1"),
    [
        ("NVIDIA H100 80GB HBM3", (9, 0), "Hopper", False),
        ("NVIDIA H200", None, "Hopper", False),
        ("NVIDIA A100-SXM4-80GB", None, "Ampere GA100", False),
        ("NVIDIA A10G", None, "Ampere GA10x", True),
        ("NVIDIA L4", None, "Ada", True),
        ("NVIDIA GeForce RTX 4090", (8, 9), "Ada", True),
        ("NVIDIA B200", (10, 0), "Blackwell", True),
        ("Tesla T4", None, "Turing", False),
        ("Tesla V100-SXM2-16GB", None, "Volta", False),
        ("Some Future GPU", None, "unknown", False),
    ],
)
def test_nvdec_codecs_and_architecture_of_known_gpus(name, capability, architecture, av1):
    gpu = M.GpuInfo(name, 16 * GiB, capability)
    assert gpu.architecture == architecture
    assert ("av1" in gpu.nvdec_codecs) is av1 and "h264" in gpu.nvdec_codecs


def test_nvidia_smi_lines_of_a_driver_that_gives_no_capability_field():
    gpu = M._parse_smi_line("NVIDIA H100 80GB HBM3, 81559, 9.0")
    assert gpu == M.GpuInfo("NVIDIA H100 80GB HBM3", 81559 * 2**20, (9, 0))
    old_driver = M._parse_smi_line("Tesla T4, 15360")
    assert old_driver.compute_capability is None and old_driver.architecture == "Turing"


def test_the_machine_as_json_rounds_to_gib_and_names_each_gpus_decoders():
    machine = M.MachineInfo(
        cpu_count=8,
        memory_total=64 * GiB,
        memory_available=GiB * 3 // 2,
        gpus=(M.GpuInfo("NVIDIA L4", 24 * GiB, (8, 9)),),
        torchcodec_cuda=True,
        notes=("a note",),
    )
    assert machine.to_json() == {
        "cpu_count": 8,
        "memory_total_gib": 64.0,
        "memory_available_gib": 1.5,
        "gpus": [
            {
                "name": "NVIDIA L4",
                "memory_gib": 24.0,
                "compute_capability": (8, 9),
                "architecture": "Ada",
                "nvdec": ["av1", "h264", "hevc", "vp9"],
            }
        ],
        "torchcodec_cuda": True,
        "notes": ["a note"],
    }


def _files(monkeypatch, files: dict[str, str]) -> None:
    """The cgroup (and /proc) files `machine` reads, as `files` says; others unchanged."""
    real = M._read
    monkeypatch.setattr(M, "_read", lambda path: files[path] if path in files else real(path))


@pytest.mark.parametrize(
    ("quota", "cores"),
    [("max 100000", None), ("150000 100000", 2), ("50000 100000", 1), ("100000000 100000", None)],
)
def test_the_cgroup_cpu_quota_caps_the_cores(monkeypatch, quota, cores):
    affinity = len(os.sched_getaffinity(0))
    _files(monkeypatch, {"/sys/fs/cgroup/cpu.max": quota})
    # None: no cap (unlimited, or more than the cores this process may run on).
    assert M._cores() == (affinity if cores is None else min(affinity, cores))


MEMINFO = "MemTotal:       16384000 kB\nMemFree:  1000 kB\nMemAvailable:    8192000 kB\n"


def test_memory_comes_from_meminfo_and_the_cgroup_limit_below_it(monkeypatch):
    _files(monkeypatch, {"/proc/meminfo": MEMINFO, "/sys/fs/cgroup/memory.max": "max"})
    assert M.probe_memory() == (16384000 * 1024, 8192000 * 1024)
    # A limit under the host's memory: the limit is the total, what it leaves is available.
    limit, used = 4 * GiB, 3 * GiB
    _files(
        monkeypatch,
        {
            "/proc/meminfo": MEMINFO,
            "/sys/fs/cgroup/memory.max": str(limit),
            "/sys/fs/cgroup/memory.current": str(used),
        },
    )
    assert M.probe_memory() == (limit, limit - used)
    # Over the limit (page cache counts): nothing available, never a negative figure.
    _files(
        monkeypatch,
        {
            "/proc/meminfo": MEMINFO,
            "/sys/fs/cgroup/memory.max": str(limit),
            "/sys/fs/cgroup/memory.current": str(limit + GiB),
        },
    )
    assert M.probe_memory() == (limit, 0)


def test_this_machine_probed_has_cores_and_memory():
    machine = M.probe_machine()
    assert 1 <= machine.cpu_count <= (os.cpu_count() or 1)
    assert 0 <= machine.memory_available <= machine.memory_total
    assert machine.process_rss > 0


def _nvidia_smi(bin_dir, script: str) -> None:
    path = bin_dir / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.processes
def test_gpus_come_from_nvidia_smi_and_an_old_driver_without_compute_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    _nvidia_smi(
        tmp_path,
        'case "$1" in *compute_cap*) echo "Field compute_cap is not valid" >&2; exit 2;; esac\n'
        'printf "Tesla T4, 15360\\nTesla T4, 15360\\n"\n',
    )
    gpus, notes = M._probe_gpus()
    assert gpus == (M.GpuInfo("Tesla T4", 15360 * 2**20),) * 2 and notes == ()
    _nvidia_smi(tmp_path, 'printf "NVIDIA H200, 143771, 9.0\\n"\n')
    assert M._probe_gpus() == ((M.GpuInfo("NVIDIA H200", 143771 * 2**20, (9, 0)),), ())
    _nvidia_smi(tmp_path, "exit 9\n")  # a broken driver: no GPU, and a note that says why
    assert M._probe_gpus() == ((), ("nvidia-smi failed; GPUs not probed",))


def test_without_nvidia_smi_no_gpu_is_probed(monkeypatch):
    monkeypatch.setattr(M.shutil, "which", lambda name: None)
    gpus, notes = M._probe_gpus()
    assert gpus == ()
    # Devices without the tool are said, not silently taken for no GPU.
    assert notes == (
        ("NVIDIA devices present but nvidia-smi not found; GPUs not probed",)
        if any(M.Path("/dev").glob("nvidia[0-9]*"))
        else ()
    )
