"""jaxload eval-parallel --num-shards N [--output merged.json] -- CMD ...

Runs CMD as N processes, shard 0..N-1, waits, and merges their JSON results into one file.

Each process is told its shard through the environment and, where CMD contains them,
placeholders substituted in its arguments:

    JAXLOAD_SHARD_ID      {shard_id}     0..N-1
    JAXLOAD_NUM_SHARDS    {num_shards}   N
    JAXLOAD_SHARD_OUTPUT  {output}       the JSON file this shard writes (with --output)

The command picks its episodes with `jaxload.tools.eval.shards.shard_episodes(..., num_shards, shard_id)`.
With N > 1 the launcher also sets, unless already set: OMP_NUM_THREADS = max(1, cores // N)
(N processes must not each start one thread per core), MUJOCO_GL = egl when an NVIDIA GPU is
present else osmesa (headless rendering), and PYTHONUNBUFFERED = 1 (so output streams); each
output line is prefixed with "[shard i/N] ". If a shard fails, the others are stopped
(SIGTERM to their process groups, then SIGKILL after 10 s) and the launcher exits with the failing shard's status,
naming it; nothing is written to --output, and the shards' files are kept for inspection.

The merged file is {"num_shards", "command", "shards": [{"shard_id", "returncode",
"seconds", and "output" with --shard-dir}], "results": jaxload.tools.eval.shards.merge_results(the
shards' JSON values)}:
lists concatenated in shard order, objects merged key by key, other values collected per
shard. With N = 1 (the default) and no --output, CMD is exec'd unchanged (placeholders
resolve to shard 0 of 1); with --output it runs unchanged in the foreground and its JSON
is wrapped in the same merged format.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from jaxload.errors import JaxloadError

NAME = "eval-parallel"
HELP = "run an evaluation command as N shard processes and merge their JSON results"
KILL_GRACE_S = 10.0
TAIL_LINES = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-shards", type=int, default=1, help="processes (default 1)")
    parser.add_argument(
        "--output", help="merged JSON file; each shard writes its own to JAXLOAD_SHARD_OUTPUT"
    )
    parser.add_argument(
        "--shard-dir",
        help="directory for the shards' JSON files (default: hidden, beside --output)",
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


def run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else list(args.cmd)
    if not cmd:
        raise JaxloadError("give the command after --, e.g. -- python eval.py")
    n = args.num_shards
    if n < 1:
        raise JaxloadError(f"--num-shards must be >= 1, got {n}")
    if not args.output and any("{output}" in a for a in cmd):
        raise JaxloadError("the command uses {output}; pass --output")
    if n == 1 and not args.output:
        env = _shard_env(0, 1, None, tune=False)
        argv = _substitute(cmd, 0, 1, None)
        sys.stdout.flush()
        os.execvpe(argv[0], argv, env)  # replaces this process: the command runs unchanged
        return 0  # not reached
    return _run_shards(cmd, n, args.output, args.shard_dir)


# --- running -----------------------------------------------------------------------------------


class _Shard:
    def __init__(self, shard_id: int, argv: list[str], env: dict[str, str], output: Path | None):
        self.shard_id, self.argv, self.env, self.output = shard_id, argv, env, output
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.process: subprocess.Popen | None = None
        self.pump: threading.Thread | None = None
        self.started = self.ended = 0.0
        self.own_group = False


def _run_shards(cmd: list[str], n: int, output: str | None, shard_dir: str | None) -> int:
    own_dir = shard_dir is None
    directory = _shard_directory(output, shard_dir) if output else None
    shards = []
    for i in range(n):
        path = directory / f"shard-{i:05d}-of-{n:05d}.json" if directory else None
        if path is not None:
            path.unlink(missing_ok=True)  # a stale file must not pass for this run's result
        argv = _substitute(cmd, i, n, path)
        shards.append(_Shard(i, argv, _shard_env(i, n, path, tune=n > 1), path))
    lock = threading.Lock()
    try:
        for shard in shards:
            _start(shard, n, prefix=n > 1, lock=lock)
        failed = _wait(shards, n)
    except BaseException:
        _stop(shards)
        raise
    if failed is not None:
        return _report_failure(failed, n, directory)
    if output is None:
        print(f"jaxload eval-parallel: {n} shard(s) finished", file=sys.stderr)
        return 0
    merged = _merge(shards, n, cmd, keep_paths=not own_dir)
    from jaxload.format import write_json_atomic

    write_json_atomic(output, merged)
    if own_dir and directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"jaxload eval-parallel: {n} shard(s) merged into {output}", file=sys.stderr)
    return 0


def _shard_directory(output: str, shard_dir: str | None) -> Path:
    if shard_dir is not None:
        path = Path(shard_dir)
    else:
        out = Path(output).resolve()
        path = out.parent / f".{out.name}.shards-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _substitute(cmd: list[str], shard_id: int, n: int, output: Path | None) -> list[str]:
    """Placeholders replaced literally, so other braces (JSON arguments) stay intact."""
    values = {"{shard_id}": str(shard_id), "{num_shards}": str(n)}
    if output is not None:
        values["{output}"] = str(output)
    out = []
    for arg in cmd:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


def _shard_env(shard_id: int, n: int, output: Path | None, *, tune: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["JAXLOAD_SHARD_ID"], env["JAXLOAD_NUM_SHARDS"] = str(shard_id), str(n)
    if output is not None:
        env["JAXLOAD_SHARD_OUTPUT"] = str(output)
    if tune:  # the user's own settings win
        env.setdefault("OMP_NUM_THREADS", str(max(1, _cores() // n)))
        env.setdefault("MUJOCO_GL", "egl" if _has_nvidia_gpu() else "osmesa")
        env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _has_nvidia_gpu() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def _start(shard: _Shard, n: int, *, prefix: bool, lock: threading.Lock) -> None:
    shard.started = time.monotonic()
    pipe = subprocess.PIPE if prefix else None
    try:
        shard.process = subprocess.Popen(
            shard.argv,
            env=shard.env,
            stdout=pipe,
            stderr=subprocess.STDOUT if prefix else None,
            # Several shards: each its own process group, so stopping one stops its children.
            # One shard keeps the terminal's group (Ctrl-C, a debugger's stdin work as usual).
            start_new_session=prefix,
        )
        shard.own_group = prefix
    except OSError as e:
        raise JaxloadError(f"cannot start {shard.argv[0]!r}: {e}") from e
    if prefix:
        tag = f"[shard {shard.shard_id}/{n}] ".encode()
        shard.pump = threading.Thread(target=_pump, args=(shard, tag, lock), daemon=True)
        shard.pump.start()


def _pump(shard: _Shard, tag: bytes, lock: threading.Lock) -> None:
    """Copies a shard's output to ours, line by line, prefixed."""
    out = sys.stdout.buffer
    for line in iter(shard.process.stdout.readline, b""):
        shard.tail.append(line.decode(errors="replace").rstrip("\n"))
        with lock:
            out.write(tag + (line if line.endswith(b"\n") else line + b"\n"))
            out.flush()


def _wait(shards: list[_Shard], n: int) -> _Shard | None:
    """Waits for every shard; on the first failure stops the rest and returns it."""
    running = list(shards)
    while running:
        for shard in list(running):
            if shard.process.poll() is None:
                continue
            shard.ended = time.monotonic()
            if shard.pump is not None:
                shard.pump.join()
            running.remove(shard)
            if shard.process.returncode != 0:
                _stop(running)
                return shard
        time.sleep(0.05)
    return None


def _stop(shards: list[_Shard]) -> None:
    """SIGTERM to each shard's process group, SIGKILL after KILL_GRACE_S."""
    alive = [s for s in shards if s.process is not None and s.process.poll() is None]
    for shard in alive:
        _signal(shard, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    for shard in alive:
        try:
            shard.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(shard, signal.SIGKILL)
            shard.process.wait()


def _signal(shard: _Shard, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        if shard.own_group:
            os.killpg(shard.process.pid, sig)
        else:
            shard.process.send_signal(sig)


def _report_failure(shard: _Shard, n: int, directory: Path | None) -> int:
    code = shard.process.returncode
    how = f"exit code {code}" if code > 0 else f"signal {-code}"
    lines = [
        f"jaxload eval-parallel: shard {shard.shard_id} of {n} failed with {how}: "
        f"{' '.join(shard.argv)}"
    ]
    if shard.tail:
        lines.append("  its last output lines:")
        lines += [f"    {line}" for line in shard.tail]
    if n > 1:
        lines.append("  the other shards were stopped; nothing was merged")
    if directory is not None:
        lines.append(f"  shard outputs kept in {directory}")
    print("\n".join(lines), file=sys.stderr)
    return code if 0 < code < 256 else 128 + (-code if code < 0 else 1)


def _merge(shards: list[_Shard], n: int, cmd: list[str], *, keep_paths: bool) -> dict:
    from jaxload.tools.eval.shards import merge_results

    values = []
    for shard in shards:
        if not shard.output.is_file():
            raise JaxloadError(
                f"shard {shard.shard_id} of {n} exited 0 but wrote no "
                f"JSON to {shard.output} (JAXLOAD_SHARD_OUTPUT / {{output}})"
            )
        try:
            values.append(json.loads(shard.output.read_text()))
        except ValueError as e:
            raise JaxloadError(
                f"shard {shard.shard_id} of {n}: {shard.output} is not valid JSON ({e})"
            ) from e
    try:
        results = merge_results(values)
    except ValueError as e:
        raise JaxloadError(f"cannot merge the shards' results: {e}") from e
    return {
        "num_shards": n,
        "command": cmd,
        "shards": [
            {
                "shard_id": s.shard_id,
                "returncode": s.process.returncode,
                "seconds": round(s.ended - s.started, 3),
                **({"output": str(s.output)} if keep_paths else {}),
            }
            for s in shards
        ],
        "results": results,
    }
