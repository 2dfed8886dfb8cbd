"""What this host offers the loader: cores (affinity and cgroup quota), memory (and the
cgroup limit), GPUs with their memory and which codecs their NVDEC decodes (a table of GPU
architectures, by compute capability, else by name). Read without creating a CUDA context
(nvidia-smi runs as a subprocess).

    machine = probe_machine()
    machine.cpu_count, [g.nvdec_codecs for g in machine.gpus]
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

GiB = 2**30
CODECS = ("h264", "hevc", "vp9", "av1")

# NVDEC per architecture, from NVIDIA's NVDEC application note (Video Codec SDK 13.0):
# Turing, GA100 (A100/A30) and Hopper (H100/H200) have no AV1 decode; GA10x, Ada and
# Blackwell do. Keyed by compute capability (major, minor).
_ARCH_BY_CAPABILITY = {
    (6, 0): "Pascal",
    (6, 1): "Pascal",
    (7, 0): "Volta",
    (7, 2): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere GA100",
    (8, 6): "Ampere GA10x",
    (8, 7): "Ampere GA10x",
    (8, 9): "Ada",
    (9, 0): "Hopper",
}
_NVDEC = {
    "Pascal": frozenset({"h264", "hevc", "vp9"}),
    "Volta": frozenset({"h264", "hevc", "vp9"}),
    "Turing": frozenset({"h264", "hevc", "vp9"}),
    "Ampere GA100": frozenset({"h264", "hevc", "vp9"}),
    "Ampere GA10x": frozenset(CODECS),
    "Ada": frozenset(CODECS),
    "Hopper": frozenset({"h264", "hevc", "vp9"}),
    "Blackwell": frozenset(CODECS),
    "unknown": frozenset({"h264"}),  # every NVDEC since Kepler decodes H.264
}
# Name patterns when nvidia-smi does not report the compute capability (older drivers).
_ARCH_BY_NAME = [
    (r"\b(GB\d+|B\d00|B300|RTX 50\d0|RTX PRO \d+ Blackwell)\b", "Blackwell"),
    (r"\b(GH200|H100|H200|H800|H20)\b", "Hopper"),
    (r"\b(A100|A800|A30)\b", "Ampere GA100"),
    (r"\b(L4|L40S?|RTX 40\d0|RTX \d000 Ada)\b", "Ada"),
    (r"\b(A10G?|A16|A2|A40|A[456]000|RTX 30\d0)\b", "Ampere GA10x"),
    (r"\b(T4|RTX 20\d0|Quadro RTX)\b", "Turing"),
    (r"\b(V100|Titan V)\b", "Volta"),
    (r"\b(P100|P40|P4|GTX 10\d0)\b", "Pascal"),
]


# NVDEC engines per GPU (NVIDIA's Video Encode and Decode support matrix): each decoder
# session keeps one busy, so jaxload runs this many decodes per GPU at once.
_NVDEC_ENGINES = [
    (r"\b(GH200|H100|H200|H800|H20|GB\d+|B\d00|B300)\b", 7),
    (r"\b(A100|A800)\b", 5),
    (r"\b(A30|L4)\b", 4),
    (r"\b(L40S?|L20)\b", 3),
    (r"\b(A10G?|A16|A40|T4|RTX (?:30|40|50)\d0)\b", 2),
]


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One GPU: name, memory and (when known) compute capability."""

    name: str
    memory_bytes: int
    compute_capability: tuple[int, int] | None = None

    @property
    def architecture(self) -> str:
        if self.compute_capability is not None:
            major, minor = self.compute_capability
            if major >= 10:
                return "Blackwell"
            if (major, minor) in _ARCH_BY_CAPABILITY:
                return _ARCH_BY_CAPABILITY[(major, minor)]
        for pattern, arch in _ARCH_BY_NAME:
            if re.search(pattern, self.name, re.IGNORECASE):
                return arch
        return "unknown"

    @property
    def nvdec_codecs(self) -> frozenset[str]:
        """Codecs its NVDEC decodes (8-bit 4:2:0, the converter's output)."""
        return _NVDEC[self.architecture]

    @property
    def nvdec_engines(self) -> int:
        """Its NVDEC engines (NVIDIA's support matrix); 2 for a GPU not in the table."""
        for pattern, engines in _NVDEC_ENGINES:
            if re.search(pattern, self.name, re.IGNORECASE):
                return engines
        return 2


@dataclasses.dataclass(frozen=True)
class MachineInfo:
    """What the loader can use on this host."""

    cpu_count: int
    memory_total: int
    memory_available: int
    gpus: tuple[GpuInfo, ...] = ()
    torchcodec_cuda: bool | None = None  # None: not probed
    process_rss: int = 0  # memory of this process: a worker imports the same libraries
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "cpu_count": self.cpu_count,
            "memory_total_gib": round(self.memory_total / GiB, 2),
            "memory_available_gib": round(self.memory_available / GiB, 2),
            "gpus": [
                {
                    "name": g.name,
                    "memory_gib": round(g.memory_bytes / GiB, 2),
                    "compute_capability": g.compute_capability,
                    "architecture": g.architecture,
                    "nvdec": sorted(g.nvdec_codecs),
                }
                for g in self.gpus
            ],
            "torchcodec_cuda": self.torchcodec_cuda,
            "notes": list(self.notes),
        }


def probe_machine() -> MachineInfo:
    """Cores, memory and GPUs of this host (no CUDA context is created)."""
    gpus, notes = _probe_gpus()
    total, available = _memory()
    return MachineInfo(
        cpu_count=_cores(),
        memory_total=total,
        memory_available=available,
        gpus=gpus,
        process_rss=_rss(),
        notes=notes,
    )


def _cores() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = _read("/sys/fs/cgroup/cpu.max")  # cgroup v2: "max 100000" or "200000 100000"
    if quota and not quota.startswith("max"):
        limit, period = (int(v) for v in quota.split()[:2])
        cores = min(cores, max(1, math.ceil(limit / period)))
    return cores


def probe_memory() -> tuple[int, int]:
    """(total, available) bytes of memory for this process (the cgroup's limit counts)."""
    return _memory()


def _memory() -> tuple[int, int]:
    # /proc/meminfo where there is one: the loader checks memory at every make_loader, and
    # a trainer imports no tooling library (psutil) for it.
    info = dict(
        line.split(":", 1) for line in (_read("/proc/meminfo") or "").splitlines() if ":" in line
    )
    if "MemTotal" in info:
        total = int(info["MemTotal"].split()[0]) * 1024
        available = int(info.get("MemAvailable", "0 kB").split()[0]) * 1024 or total
    else:
        import psutil

        vm = psutil.virtual_memory()
        total, available = int(vm.total), int(vm.available)
    limit = _read("/sys/fs/cgroup/memory.max")
    if limit and limit.isdigit() and int(limit) < total:
        used = int(_read("/sys/fs/cgroup/memory.current") or 0)
        total, available = int(limit), min(available, int(limit) - used)
    return total, max(0, available)


def _rss() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        statm = (_read("/proc/self/statm") or "0 0").split()
        return int(statm[1]) * os.sysconf("SC_PAGE_SIZE")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _probe_gpus() -> tuple[tuple[GpuInfo, ...], tuple[str, ...]]:
    """GPUs from nvidia-smi (a subprocess: this process creates no CUDA context)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        if any(Path("/dev").glob("nvidia[0-9]*")):
            return (), ("NVIDIA devices present but nvidia-smi not found; GPUs not probed",)
        return (), ()
    for fields in ("name,memory.total,compute_cap", "name,memory.total"):
        try:
            out = subprocess.run(
                [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        return tuple(_parse_smi_line(line) for line in out.splitlines() if line.strip()), ()
    return (), ("nvidia-smi failed; GPUs not probed",)


def _parse_smi_line(line: str) -> GpuInfo:
    parts = [p.strip() for p in line.split(",")]
    capability = None
    if len(parts) > 2 and re.fullmatch(r"\d+\.\d+", parts[2]):
        capability = tuple(int(v) for v in parts[2].split("."))
    return GpuInfo(parts[0], int(float(parts[1])) * 2**20, capability)
