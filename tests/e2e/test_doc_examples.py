"""Every code block in README.md and docs/*.md runs, so a stale example fails CI.

Blocks are run as a reader would paste them, in a working directory holding the datasets
the docs name (written by tests/support/lerobot_factory.py and converted by the real converter):

* `python` blocks of one file run in order in one fresh interpreter (a later block may use
  what an earlier one defined, as in a notebook), with 4 CPU JAX devices;
* `bash` blocks run line by line (`\\` continues a line, `#` starts a comment); a line is
  skipped only when it matches a rule of SKIPPED below, each saying why it cannot run here
  (the network, the install itself, which .ci/run runs);
* blocks with another tag (`json`, `text`) or none are data or program output, not code:
  they must not hold a `jaxload` command or a Python import (checked).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")

# (pattern a bash line matches, why it is not run here)
SKIPPED = [
    (
        r"scripts/install\.sh",
        "the install itself: .ci/run runs it (then the tests, which run train_pjit.py)",
    ),
    (r"jaxload convert (lerobot/|hf://|gs://|s3://)", "needs the network (hub or bucket)"),
    (r"--engine ray", "starts a Ray cluster (tests/converters/test_engines.py covers it)"),
    (r"-m pytest", "the test suite itself, which this test is part of"),
]


def code_blocks(path: Path) -> list[tuple[str, int, str]]:
    """(tag, first line number, text) of every fenced block of a Markdown file."""
    blocks, tag, start, lines = [], None, 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = FENCE.match(line)
        if tag is None and match:
            tag, start, lines = match.group(1), number + 1, []
        elif tag is not None and line.startswith("```"):
            blocks.append((tag, start, "\n".join(lines)))
            tag = None
        elif tag is not None:
            lines.append(line)
    assert tag is None, f"{path}: unclosed code block at line {start - 1}"
    return blocks


def bash_commands(text: str) -> list[str]:
    """The commands of a bash block: continuations joined, comments and blanks dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            commands.append(line)
    return commands


def skip_reason(command: str) -> str | None:
    for pattern, why in SKIPPED:
        if re.search(pattern, command):
            return why
    return None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The datasets the docs name, at the paths they use: a 30 fps LeRobot source with two
    cameras and 8-dim actions, its conversion, two converted datasets for mixtures, and
    four robots' datasets that differ in everything (out/arm_av1_15fps, ...)."""
    from jaxload.converters.convert import convert
    from tests.support.embodiments import convert_embodiments, write_embodiments
    from tests.support.lerobot_factory import write_lerobot_v3

    root = tmp_path_factory.mktemp("doc_examples")
    cameras = {"observation.images.top": (48, 64), "observation.images.wrist": (48, 64)}
    src = write_lerobot_v3(
        root / "path/to/lerobot_dataset",
        fps=30,
        episode_lengths=(40, 12, 30, 25),
        cameras=cameras,
        action_dim=8,
        state_dim=8,
    )
    for name in ("my_dataset", "ds", "a"):
        convert(src, root / "out" / name, workers=1, progress=False)
    convert(src, root / "out/exact", workers=1, progress=False, video_codec="lossless")
    other = write_lerobot_v3(
        root / "src_b", fps=30, episode_lengths=(20, 20), cameras={"observation.image": (48, 64)}
    )
    convert(other, root / "out/b", workers=1, progress=False)
    # docs/LOADER.md's cross-embodiment recipe: four robots' datasets (tests/support/embodiments.py)
    convert_embodiments(write_embodiments(root / "robots"), root / "out")
    return root


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(REPO)
    return env


DOC_IDS = [str(p.relative_to(REPO)) for p in DOCS]


@pytest.mark.parametrize("doc", DOC_IDS)
@pytest.mark.processes
def test_python_blocks_run(doc, workdir, tmp_path):
    blocks = [(line, text) for tag, line, text in code_blocks(REPO / doc) if tag == "python"]
    if not blocks:
        pytest.skip(f"{doc} has no python block")
    # One script, each block after a marker that names its line, all under the __main__
    # guard a script with worker processes needs (names stay module globals).
    parts = [f"print('--- {doc}:{line}', flush=True)\n{text}" for line, text in blocks]
    script = tmp_path / "doc_blocks.py"
    body = "\n\n".join(parts)
    script.write_text(f'if __name__ == "__main__":\n{textwrap.indent(body, "    ")}\n')
    here = tmp_path / "work"  # a copy: what one doc writes (a checkpoint) is not another's
    shutil.copytree(workdir, here)
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=here,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    markers = re.findall(r"^--- (\S+)$", run.stdout, re.M)
    assert run.returncode == 0, (
        f"the block at {markers[-1] if markers else doc} failed:\n{run.stderr[-3000:]}"
    )


@pytest.mark.parametrize("doc", DOC_IDS)
@pytest.mark.processes
def test_bash_blocks_run(doc, workdir, tmp_path):
    """In a copy of the working directory without out/: a doc's commands make their own
    outputs, in order (`jaxload info out/x` after `jaxload convert ... out/x`)."""
    here = tmp_path / "work"
    shutil.copytree(workdir, here, ignore=lambda d, names: ["out"] if Path(d) == workdir else [])
    commands = [
        (line, command)
        for tag, line, text in code_blocks(REPO / doc)
        if tag == "bash"
        for command in bash_commands(text)
    ]
    ran = 0
    for line, command in commands:
        if skip_reason(command):
            continue
        run = subprocess.run(
            ["bash", "-c", command],
            cwd=here,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, f"{doc}:{line}: `{command}` failed:\n{run.stderr[-3000:]}"
        ran += 1
    if not ran:
        pytest.skip(f"{doc} has no bash command that runs here")


@pytest.mark.parametrize("doc", DOC_IDS)
def test_other_blocks_hold_no_code(doc):
    """A command or an import in an untagged block would escape the two tests above."""
    for tag, line, text in code_blocks(REPO / doc):
        if tag in ("python", "bash"):
            continue
        assert not re.search(r"^\s*(import |from \S+ import |jaxload [a-z-]+(\s|$))", text, re.M), (
            f"{doc}:{line}: a ```{tag or '(untagged)'} block holds code; tag it python or bash"
        )


def test_the_skip_rules_name_real_lines():
    """Every rule skips something (a rule that matches nothing is stale)."""
    commands = [
        c
        for doc in DOCS
        for tag, _, text in code_blocks(doc)
        if tag == "bash"
        for c in bash_commands(text)
    ]
    for pattern, why in SKIPPED:
        assert any(re.search(pattern, c) for c in commands), f"unused rule {pattern!r} ({why})"


def test_shlex_can_split_every_command():
    """Unbalanced quotes in a doc command would be a copy-paste error for the reader."""
    for doc in DOCS:
        for tag, _line, text in code_blocks(doc):
            if tag == "bash":
                for command in bash_commands(text):
                    shlex.split(command)
