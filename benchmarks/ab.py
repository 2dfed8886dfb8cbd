"""Paired A/B of the loader against another commit, side by side in one run: the same
converted dataset read by this tree and by `--base` (a git revision, checked out in a
temporary worktree), each run in a fresh process, rounds alternating which side goes
first, so both see the same machine. Prints samples/s per run and this tree's / base's
ratio per round, for numpy batches (no `sharding`) and sharded batches (global
`jax.Array`s over `--devices` CPU devices), read from disk or (`--remote`) from the S3
stand-in of tests/support/s3_server.py with `--latency-ms` per request and a cache of
`--cache-fraction` of the shards' bytes.

    python benchmarks/ab.py --base da43c00                     # 96x128, 4 rounds
    python benchmarks/ab.py --base da43c00 --remote --rounds 3
    python benchmarks/ab.py --base HEAD~1 --height 480 --width 640 --episodes 8

Where the base cannot read this tree's dataset (a format version between them), the base
side reads the same source converted by its own converter (local runs).

Each side runs `make_loader(path, options=PipelineOptions(num_workers=...))`, the call both
APIs take, with the same windows as benchmarks/bench_remote.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import bench_data  # noqa: E402

# What one side runs, in a fresh process with its tree first on sys.path.
MEASURE = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np
import jaxload
args = json.loads(sys.argv[1])
kw = dict(global_batch_size=args["batch_size"], seed=0,
          delta_timestamps={"action": [k / 30 for k in range(16)]},
          options=jaxload.PipelineOptions(num_workers=args["workers"]))
if args["remote"]:
    kw.update(storage_options=args["storage_options"], remote=args["remote"])
if args["sharded"]:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    kw["sharding"] = NamedSharding(mesh, P("data"))
loader = jaxload.make_loader(args["path"], **kw)

def take():
    batch = next(loader)
    if args["sharded"]:
        import jax
        jax.block_until_ready(batch)

for _ in range(args["warmup"]):
    take()
began, cpu = time.perf_counter(), time.process_time()
for _ in range(args["batches"]):
    take()
seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
loader.close()
print(json.dumps({"samples_per_s": args["batches"] * args["batch_size"] / seconds,
                  "cpu_ms_per_batch": 1000 * cpu / args["batches"]}))
"""


def checkout(base: str, into: Path) -> Path:
    """A worktree of `base` under `into`; a base from before converters/ moved into
    jaxload/ gets `jaxload/converters` linked to its `converters/` (what the installed
    package mapped then), so that it imports its own."""
    tree = into / "base"
    subprocess.run(
        ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "-q", str(tree), base],
        check=True,
    )
    if (tree / "converters").is_dir() and not (tree / "jaxload" / "converters").exists():
        (tree / "jaxload" / "converters").symlink_to(tree / "converters")
    return tree


def readable(tree: Path, dataset: Path) -> bool:
    """Whether the jaxload of `tree` opens `dataset` (not across a format version change)."""
    code = "import sys, jaxload; jaxload.open(sys.argv[1])"
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, "-c", code, str(dataset)],
        cwd=tree,
        env=env,
        check=False,
        capture_output=True,
    )
    return out.returncode == 0


def convert_with(tree: Path, source: Path, out: Path) -> str:
    """`source` converted by the converter of `tree` (each side reads its own format)."""
    code = (
        "import sys; from jaxload.converters.convert import convert; "
        "convert(sys.argv[1], sys.argv[2], progress=False)"
    )
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run(
        [sys.executable, "-c", code, str(source), str(out)], cwd=tree, env=env, check=True
    )
    print(f"base side: {source.name} converted by {tree.name}'s converter (another format)")
    return str(out)


def measure(tree: Path, config: dict, devices: int) -> dict:
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    return run_in_tree(MEASURE, tree, config, env if config["sharded"] else None)


def run_in_tree(
    script: str, tree: Path, config: dict, env: dict | None = None, timeout: float | None = None
) -> dict:
    """`script` in a fresh process importing `tree` (its cwd and PYTHONPATH), given `config`
    as JSON in argv[1]; returns the JSON of its last line of output."""
    environ = dict(os.environ, PYTHONPATH=str(tree), **(env or {}))
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(config)],
        cwd=tree,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if out.returncode:
        raise RuntimeError(f"{tree}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--devices", type=int, default=2, help="CPU devices for sharded batches")
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--remote", action="store_true", help="read from the S3 stand-in")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--cache-fraction", type=float, default=0.10)
    parser.add_argument("--only", choices=("numpy", "sharded"), default=None)
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=None, help="write the runs as JSON")
    args = parser.parse_args(argv)

    spec = bench_data.DatasetSpec(
        "remote", height=args.height, width=args.width, episodes=args.episodes
    )
    source, root = bench_data.prepare(spec, args.cache)
    base_sha = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", args.base],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    server = None
    with tempfile.TemporaryDirectory(prefix="jaxload-ab-") as scratch:
        base = checkout(args.base, Path(scratch))
        try:
            path, remote, options = str(root), None, None
            paths = {"head": path, "base": path}
            if not args.remote and not readable(base, root):  # a format change between them
                paths["base"] = convert_with(base, source, Path(scratch) / "base-dataset")
            if args.remote:
                from jaxload import format as fmt
                from tests.support.s3_server import S3Server

                info = fmt.read_info(root)
                shards = sum(
                    (root / fmt.shard_path(s)).stat().st_size for s in range(info.num_shards)
                )
                server = S3Server.start(latency_s=args.latency_ms / 1000)
                server.upload(str(root), "s3://bench/ds")
                path, options = "s3://bench/ds", server.storage_options()
                remote = {"cache_bytes": int(args.cache_fraction * shards), "log_every_s": 0}
            kinds = [args.only] if args.only else ["numpy", "sharded"]
            runs: dict[str, dict[str, list[float]]] = {k: {"head": [], "base": []} for k in kinds}
            # CPU ms per batch of the measuring process (read threads included): steadier
            # than samples/s on a machine shared with other work.
            cpu: dict[str, dict[str, list[float]]] = {k: {"head": [], "base": []} for k in kinds}
            for r in range(args.rounds):
                for kind in kinds:
                    order = [("head", REPO_ROOT), ("base", base)]
                    for side, tree in order if r % 2 == 0 else order[::-1]:
                        config = {
                            "path": paths[side] if not args.remote else path,
                            "batch_size": args.batch_size,
                            "batches": args.batches,
                            "warmup": args.warmup,
                            "workers": args.workers,
                            "sharded": kind == "sharded",
                            "remote": remote,
                            "storage_options": options,
                        }
                        got = measure(tree, config, args.devices)
                        runs[kind][side].append(got["samples_per_s"])
                        cpu[kind][side].append(got["cpu_ms_per_batch"])
                    head, old = runs[kind]["head"][-1], runs[kind]["base"][-1]
                    print(
                        f"round {r + 1} {kind}: head {head:.0f}, base {base_sha} {old:.0f} "
                        f"samples/s ({head / old:.3f}x)",
                        flush=True,
                    )
        finally:
            if server is not None:
                server.stop()
            subprocess.run(
                ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(base)],
                check=False,
            )
    where = f"remote at {args.latency_ms:g} ms" if args.remote else "local"
    print(f"{root.name}, {where}, {args.workers} workers, batch {args.batch_size}:")
    for kind, sides in runs.items():
        ratios = [h / b for h, b in zip(sides["head"], sides["base"], strict=True)]
        print(
            f"  {kind}: head/base median {statistics.median(ratios):.3f} "
            f"(rounds {', '.join(f'{x:.3f}' for x in ratios)}); head "
            f"{statistics.median(sides['head']):.0f}, base {statistics.median(sides['base']):.0f} "
            f"samples/s; CPU per batch: head {statistics.median(cpu[kind]['head']):.1f}, base "
            f"{statistics.median(cpu[kind]['base']):.1f} ms"
        )
    if args.out:
        doc = {"base": base_sha, "where": where, "runs": runs, "cpu_ms_per_batch": cpu}
        args.out.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
