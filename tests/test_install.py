"""The GPU install path cannot drift: pyproject.toml's `gpu` extra is the set measured
together on an H200 (benchmarks/RESULTS.md, "GPU decoding"); scripts/install.sh installs
that extra on a GPU host, with every pin of constraints.txt but its CPU torch and
torchcodec; README's "On a GPU host", docs/LOADER.md and the carry for GPU hosts without
network (benchmarks/gpu_carry.py) name the same versions."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement

from benchmarks import gpu_carry
from jaxload.decode import nvdec
from tests.conftest import REPO_ROOT

PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
GPU = {r.name: r for r in map(Requirement, PROJECT["optional-dependencies"]["gpu"])}
BASE = {r.name: r for r in map(Requirement, PROJECT["dependencies"])}
INSTALL = (REPO_ROOT / "scripts" / "install.sh").read_text()
CONSTRAINTS = (REPO_ROOT / "constraints.txt").read_text().splitlines()


def pinned(name: str) -> str:
    (spec,) = GPU[name].specifier
    assert spec.operator == "==", f"the gpu extra pins {name} exactly: {spec}"
    return spec.version


def section(text: str, heading: str) -> str:
    """From `heading` to the next heading of its level or above."""
    start = text.index(heading + "\n")
    level = heading.split(" ")[0]
    rest = text[start + len(heading) :]
    ends = [m.start() for m in re.finditer(r"^(#+) ", rest, re.M) if len(m.group(1)) <= len(level)]
    return rest[: ends[0]] if ends else rest


def flat(text: str) -> str:
    """Markdown as one line: bold marks dropped, any run of whitespace one space."""
    return re.sub(r"\s+", " ", text.replace("**", ""))


def gpu_branch() -> str:
    """scripts/install.sh's `if has_gpu; then` block that installs (not the Python choice)."""
    start = INSTALL.index("if has_gpu; then\n  # The `gpu` extra")
    return INSTALL[start : INSTALL.index("\nelse\n", start)]


def test_the_gpu_extra_is_the_measured_set():
    assert set(GPU) == {"torch", "torchcodec", "jax"}
    assert GPU["jax"].extras == {"cuda13"}  # CUDA 13, as PyPI's torch 2.11.0 and torchcodec 0.11.0
    results = (REPO_ROOT / "benchmarks" / "RESULTS.md").read_text()
    gpu_section = section(results, "## GPU decoding (`benchmarks/bench_gpu.py`)")
    machine = flat(next(p for p in gpu_section.split("\n\n") if p.startswith("Machine:")))
    for name in GPU:
        assert f"{name} {pinned(name)}" in machine, (name, machine)
    # The runtime's own requirements admit the set; its torchcodec floor is the one GPU
    # decoding checks for (jaxload.decode.nvdec) and docs/LOADER.md states.
    for name in GPU:
        assert BASE[name].specifier.contains(pinned(name)), (BASE[name], pinned(name))
    (floor,) = BASE["torchcodec"].specifier
    assert floor.operator == ">=" and floor.version == ".".join(map(str, nvdec.MIN_TORCHCODEC))
    loader = (REPO_ROOT / "docs" / "LOADER.md").read_text()
    devices = flat(section(loader, '## Video decoded on the devices (`decode_device="cuda"`)'))
    assert f"torchcodec >= {floor.version} is needed" in devices
    for name in GPU:
        assert f"{name} {pinned(name)}" in devices


def test_install_sh_installs_the_gpu_extra_with_the_other_pins():
    branch = gpu_branch()
    assert '-e ".[dev,gpu]"' in branch
    assert not re.search(r"torch(codec)?==\d", branch), "versions belong in pyproject.toml"
    # What it keeps of constraints.txt: every pin but torch's and torchcodec's (the CPU set).
    dropped = re.search(r"grep -v -E '([^']+)' constraints\.txt >\"\$CONSTRAINTS\"", branch)
    assert dropped and '-c "$CONSTRAINTS"' in branch
    kept = [line for line in CONSTRAINTS if not re.search(dropped.group(1), line)]
    pins = [line.split("==")[0] for line in CONSTRAINTS if "==" in line and line[0] != "#"]
    assert {"torch", "torchcodec"} <= set(pins)
    assert [p.split("==")[0] for p in kept if "==" in p and p[0] != "#"] == [
        p for p in pins if p not in ("torch", "torchcodec")
    ]
    # LeRobot's install must not bring the CPU pins back, and jax's Python comes first.
    assert "CONSTRAINTS=$CONSTRAINTS bash scripts/install_lerobot.sh" in INSTALL
    lerobot = (REPO_ROOT / "scripts" / "install_lerobot.sh").read_text()
    assert '-c "$CONSTRAINTS"' in lerobot and "-c constraints.txt" not in lerobot
    assert "if has_gpu; then DEFAULT_PYTHON=3.12; fi" in INSTALL
    assert "sys.version_info < (3, 12)" in branch


def test_the_readme_says_the_set_and_the_one_command():
    text = flat(section((REPO_ROOT / "README.md").read_text(), "### On a GPU host"))
    for name in GPU:
        assert f"{name} {pinned(name)}" in text, name
    assert "jax[cuda13]" in text and "-e '.[gpu]'" in text
    assert "bash scripts/gpu_check.sh" in text
    assert 'docs/LOADER.md, "Video decoded on the devices"' in text
    assert 'benchmarks/RESULTS.md, "GPU decoding"' in text


def test_the_carry_brings_the_gpu_extras_torchcodec():
    assert f"torchcodec=={pinned('torchcodec')}" in gpu_carry.WHEELS
