r"""jaxload at DROID's scale: open, make_loader, first batch and memory at DROID's shape and
at 100k episodes; conversion memory and time per episode from 1k to 100k episodes.

    python benchmarks/bench_scale.py open --base 72e4184 --repeats 3
    python benchmarks/bench_scale.py open --datasets droid 100k empty --workers 0 --repeats 5
    python benchmarks/bench_scale.py open --datasets droid --workers 0 --alone --base e70d1b9
    python benchmarks/bench_scale.py convert --episodes 1000 10000 --base 72e4184 --repeats 2
    python benchmarks/bench_scale.py convert --episodes 100000 --repeats 1 --tag convert-100k
    python benchmarks/bench_scale.py convert --episodes 10000 --per-file 1000 10000 \
        --first 2000 --base 72e4184 --repeats 1 --tag convert-per-file

`open` measures, each run in a fresh process (jax imported first, as in a trainer):
`jaxload.open(path)`, then `make_loader(path, ...)` (batches of 32, a 16-step action
window; with `--alone` also in a process that did not open the dataset first), its first
batch and 50 more batches, wall and CPU seconds, the RSS of the training process, and
the pickled dataset's size (what Grain sends each worker). Each dataset runs with the
default options (on 2 cores: no worker process), then with `--workers` worker processes
for the RSS of each worker, compared with the same worker reading the tiny template
dataset (`empty`: the modules and buffers every worker has).
Datasets (benchmarks/scale_data.py, cached under --cache):

* `droid`: DROID's counts (92,233 episodes, 27 M frames, 3 cameras, 20.4 M GOP records),
  metadata from a real conversion, only shard 0 written: read in source order
  (`shuffle=False`);
* `100k`: a real conversion of a LeRobot source of 100,000 episodes (lengths 4..12,
  one 32x32 camera), read shuffled.

`plateau` reads shuffled until every shard was touched, each run in a fresh process:
`make_loader(path)` (alone, and after `jaxload.open` without workers), the first batch,
then every process's open files, RSS and PSS every few batches (the last sample is the
plateau), with `--worker-counts` workers started as `--worker-start` says (two: side by
side). Its datasets: `droid`, with **every** shard on disk (`droid-all` under --cache:
~15 GB, written in ~4-25 minutes on first use), and `empty`.

    python benchmarks/bench_scale.py plateau --datasets empty --worker-counts 4 \
        --worker-start spawn forkserver --repeats 3 --batches 60 --cache /tmp/scale

`convert` converts LeRobot sources (tabular, or `--cameras 1`: a 32x32 camera) of N
episodes, `--per-file` episodes per data file, with `--workers` processes, each in a fresh
process, and reports wall time, CPU per episode (converter and workers), the peak RSS of
the converter's main process and of its largest worker, and `jaxload stats` on the
result (the stats pass convert ends with) per frame record.

`--base REV` runs every measurement with the tree of another commit too (a temporary git
worktree, as benchmarks/ab.py), alternating which side goes first; both sides read the
same datasets. Results go to benchmarks/results_scale.json, under the subcommand's name
(or `--tag`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from benchmarks import scale_data, scale_report  # noqa: E402
from benchmarks.ab import checkout, run_in_tree  # noqa: E402

DEFAULT_CACHE = REPO_ROOT / "runs" / "scale"
RESULTS = REPO_ROOT / "benchmarks" / "results_scale.json"

# Both sides import their own tree, converters included (the installed package maps
# jaxload.converters to one checkout's converters/: run with a venv installed from this
# tree; benchmarks.ab.checkout links the base tree's).
CHECK_TREE = r"""
import jaxload, jaxload.converters
for module in (jaxload, jaxload.converters):
    if not os.path.realpath(module.__file__).startswith(os.path.realpath(os.getcwd())):
        sys.exit(f"{module.__name__} imports from {module.__file__}, not this tree {os.getcwd()}")
def worker_processes():
    # Spawned by the trainer, or forked by the fork server it started (jaxload.workers.fork_server).
    try:
        from jaxload.workers.processes import worker_pids
    except ImportError:  # a tree before the fork server: spawned children only
        return [p for p in me.children() if "spawn_main" in " ".join(p.cmdline())]
    return [psutil.Process(pid) for pid in worker_pids()]
def fork_servers():
    return [p for p in me.children() if "multiprocessing.forkserver" in " ".join(p.cmdline())]
"""

# One side's measurement of a loader, in a fresh process with its tree first on sys.path.
MEASURE_OPEN = (
    r"""
import json, os, pickle, resource, sys, time
sys.path.insert(0, os.getcwd())
import psutil
args = json.loads(sys.argv[1])
me = psutil.Process()
import jax  # a JAX trainer has it imported
began = time.perf_counter()
import jaxload
out = {"import_s": time.perf_counter() - began}
"""
    + CHECK_TREE
    + r"""
out["load_before"] = os.getloadavg()[0]
if args["open"]:
    began, cpu = time.perf_counter(), time.process_time()
    ds = jaxload.open(args["path"])
    out["open_s"], out["open_cpu_s"] = time.perf_counter() - began, time.process_time() - cpu
    out["rss_after_open"] = me.memory_info().rss
began, cpu = time.perf_counter(), time.process_time()
loader = jaxload.make_loader(
    args["path"], global_batch_size=args["batch_size"], seed=0, shuffle=args["shuffle"],
    delta_timestamps={"action": [k / args["fps"] for k in range(16)]},
    options=jaxload.PipelineOptions(num_workers=args["workers"]), host_index=0, host_count=1)
out["make_loader_s"] = time.perf_counter() - began
out["make_loader_cpu_s"] = time.process_time() - cpu
began, cpu = time.perf_counter(), time.process_time()
next(loader)
out["first_batch_s"] = time.perf_counter() - began
out["first_batch_cpu_s"] = time.process_time() - cpu  # this process's threads only
began = time.perf_counter()
for _ in range(args["batches"]):
    next(loader)
out["samples_per_s"] = args["batches"] * args["batch_size"] / (time.perf_counter() - began)
workers = worker_processes()
out["rss"] = me.memory_info().rss
out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out["worker_rss"] = [p.memory_info().rss for p in workers]
out["worker_pss"] = [p.memory_full_info().pss for p in workers]
out["load_after"] = os.getloadavg()[0]
loader.close()
if args["open"]:  # what Grain sends each worker of it (after the RSS figures: it is a copy)
    out["pickle_bytes"] = len(pickle.dumps(ds))
print(json.dumps(out))
"""
)

# A shuffled read long enough to touch every shard, in a fresh process: make_loader alone
# (or after jaxload.open), the first batch, then every process's open files, RSS and PSS
# (/proc/<pid>/smaps_rollup) each `every` batches; the last sample is the plateau.
MEASURE_PLATEAU = (
    r"""
import json, os, resource, sys, time
sys.path.insert(0, os.getcwd())
import psutil
args = json.loads(sys.argv[1])
me = psutil.Process()
import jax  # a JAX trainer has it imported
import jaxload
"""
    + CHECK_TREE
    + r"""
def pss(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("Pss:"))
def sample():
    workers = worker_processes()
    return {"trainer": {"files": len(os.listdir(f"/proc/{me.pid}/fd")),
                        "rss": me.memory_info().rss, "pss": pss(me.pid)},
            "servers": [{"rss": s.memory_info().rss, "pss": pss(s.pid)} for s in fork_servers()],
            "workers": [{"files": len(os.listdir(f"/proc/{w.pid}/fd")),
                         "rss": w.memory_info().rss, "pss": pss(w.pid)} for w in workers]}
out = {"load_before": os.getloadavg()[0]}
if args["open_first"]:
    began, cpu = time.perf_counter(), time.process_time()
    ds = jaxload.open(args["path"])
    out["open_s"], out["open_cpu_s"] = time.perf_counter() - began, time.process_time() - cpu
began, cpu = time.perf_counter(), time.process_time()
loader = jaxload.make_loader(
    args["path"], global_batch_size=args["batch_size"], seed=0, shuffle=True,
    delta_timestamps={"action": [k / args["fps"] for k in range(16)]},
    options=jaxload.PipelineOptions(num_workers=args["workers"]), host_index=0, host_count=1)
out["make_loader_s"] = time.perf_counter() - began
out["make_loader_cpu_s"] = time.process_time() - cpu
began = time.perf_counter()
batch = next(loader)
out["first_batch_s"] = time.perf_counter() - began
shards, samples = set(), []
per_shard = args["episodes_per_shard"]
shards.update((batch["episode_index"] // per_shard).tolist())
began = time.perf_counter()
for k in range(1, args["batches"] + 1):
    batch = next(loader)
    shards.update((batch["episode_index"] // per_shard).tolist())
    if k % args["every"] == 0:
        samples.append({"batch": k, "shards_touched": len(shards), **sample()})
out["samples_per_s"] = args["batches"] * args["batch_size"] / (time.perf_counter() - began)
out["samples"] = samples
out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out["load_after"] = os.getloadavg()[0]
loader.close()
print(json.dumps(out))
"""
)

# One side's conversion, in a fresh process.
MEASURE_CONVERT = (
    r"""
import json, os, resource, sys, time
sys.path.insert(0, os.getcwd())
args = json.loads(sys.argv[1])
"""
    + CHECK_TREE
    + r"""
from jaxload.converters.convert import convert
import jaxload.stats
def cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
out0 = {"load_before": os.getloadavg()[0]}
began, cpu_before = time.perf_counter(), cpu()  # imports excluded
convert(args["src"], args["out"], workers=args["workers"], progress=False, episodes=args["episodes"])
out = {**out0, "convert_s": time.perf_counter() - began, "cpu_s": cpu() - cpu_before}
out["load_after"] = os.getloadavg()[0]
out["main_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out["worker_peak_rss"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
with open(os.path.join(args["out"], "meta", "info.json")) as f:
    out["frames"] = json.load(f)["total_frames"]
began = time.perf_counter()
jaxload.stats.compute_stats(args["out"])
out["stats_s"] = time.perf_counter() - began
print(json.dumps(out))
"""
)


def sides(base: str | None, scratch: Path) -> list[tuple[str, Path]]:
    out = [("head", REPO_ROOT)]
    if base:
        out.append((f"base {base}", checkout(base, scratch)))
    return out


# --- datasets ------------------------------------------------------------------------------


def template(cache: Path) -> Path:
    """The converted template of the DROID-shaped dataset (and the 'empty worker' dataset)."""
    from jaxload.converters.convert import convert

    out = cache / "droid-template"
    if not out.exists():
        src = cache / "droid-template-src"
        if not src.exists():
            scale_data.write_template_source(src)
        # Fixed GOPs: scale_data tiles the template's first GOP record over DROID's lengths.
        convert(src, out, video_codec="h264", workers=1, progress=False)
    return out


def droid(cache: Path) -> Path:
    out = cache / "droid"
    if not out.exists():
        scale_data.write_droid_shaped(out, template(cache))
    return out


def droid_all(cache: Path) -> Path:
    """DROID's counts with every shard on disk (1,845 shards, ~22 M records, ~15 GB): GOP
    records of the template's 36x64 cameras at crf 51 (~840 bytes), so the shards are
    small; decoding them measures nothing of DROID's 180x320 (`bench_remote`'s is)."""
    out = cache / "droid-all"
    if not out.exists():
        from jaxload.converters.convert import convert

        tiny = cache / "droid-tiny-template"
        if not tiny.exists():
            src = cache / "droid-template-src"
            if not src.exists():
                scale_data.write_template_source(src)
            convert(src, tiny, workers=1, progress=False, crf=51)
        tmp = out.with_name(out.name + ".tmp")
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp)
        began = time.perf_counter()
        scale_data.write_droid_shaped(tmp, tiny, all_shards=True, workers=2)
        tmp.rename(out)
        print(f"wrote {out} in {time.perf_counter() - began:.0f} s", flush=True)
    return out


def lerobot_source(cache: Path, episodes: int, per_file: int, cameras: int) -> Path:
    """A LeRobot source of `episodes` episodes of 4..12 frames (seeded)."""
    path = cache / f"src-{episodes}ep-{per_file}perfile-{cameras}cam"
    if not path.exists():
        lengths = np.random.default_rng(0).integers(2, 7, episodes) * 2  # even: whole GOPs
        cams = {f"observation.images.cam{i}": (32, 32) for i in range(cameras)}
        tmp = path.with_name(path.name + ".tmp")
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp)
        began = time.perf_counter()
        scale_data.write_lerobot_source(
            tmp, lengths=lengths, episodes_per_file=per_file, cameras=cams
        )
        tmp.rename(path)
        print(f"wrote {path} in {time.perf_counter() - began:.0f} s", flush=True)
    return path


def converted_100k(cache: Path) -> Path:
    from jaxload.converters.convert import convert

    out = cache / "100k-1cam"
    if not out.exists():
        src = lerobot_source(cache, 100_000, 1000, 1)
        began = time.perf_counter()
        convert(src, out, workers=2, progress=False)
        print(f"converted {out} in {time.perf_counter() - began:.0f} s", flush=True)
    return out


# --- subcommands ---------------------------------------------------------------------------


def cmd_open(args) -> dict:
    datasets = {}
    if "droid" in args.datasets:
        datasets["droid"] = (droid(args.cache), False, scale_data.DROID_FPS)
    if "100k" in args.datasets:
        datasets["100k"] = (converted_100k(args.cache), True, 15)
    if "empty" in args.datasets:
        datasets["empty"] = (template(args.cache), True, scale_data.DROID_FPS)
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="jaxload-scale-") as scratch:
        trees = sides(args.base, Path(scratch))
        try:
            for r in range(args.repeats):
                for side, tree in trees if r % 2 == 0 else trees[::-1]:
                    for name, (path, shuffle, fps) in datasets.items():
                        # The defaults (on 2 cores: no worker process) for the times and the
                        # trainer, then `--workers` worker processes for their memory; with
                        # --alone also make_loader(path) without jaxload.open before it.
                        runs = [(None, True), (args.workers, True)][: 2 if args.workers else 1]
                        for workers, opened in runs + ([(None, False)] if args.alone else []):
                            config = dict(path=str(path), open=opened, shuffle=shuffle, fps=fps,
                                          workers=workers, batch_size=32, batches=args.batches)  # fmt: skip
                            got = run_in_tree(MEASURE_OPEN, tree, config, timeout=3600)
                            key = f"{name}, {'default' if workers is None else workers} workers"
                            key += "" if opened else ", make_loader alone"
                            results.setdefault(key, {}).setdefault(side, []).append(got)
                            print(
                                f"round {r + 1} {key} {side}: {scale_report.brief_open(got)}",
                                flush=True,
                            )
        finally:
            _remove_worktrees(trees)
    scale_report.print_open(results, args.workers)
    return results


def cmd_plateau(args) -> dict:
    """DROID's shape with every shard on disk, read shuffled with 0/2/4 workers until every
    shard was touched; make_loader alone and after open; the empty dataset's workers."""
    datasets = {}
    if "droid" in args.datasets:
        datasets["droid"] = (droid_all(args.cache), scale_data.EPISODES_PER_SHARD)
    if "empty" in args.datasets:
        datasets["empty"] = (template(args.cache), 1)
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="jaxload-scale-") as scratch:
        trees = sides(args.base, Path(scratch))
        try:
            for r in range(args.repeats):
                for side, tree in trees if r % 2 == 0 else trees[::-1]:
                    _plateau_round(args, datasets, r, side if args.base else "", tree, results)
        finally:
            _remove_worktrees(trees)
    scale_report.print_plateau(results)
    return results


def _plateau_round(args, datasets: dict, r: int, side: str, tree: Path, results: dict) -> None:
    """One round of the plateau measurements in `tree` (one side of an A/B with --base)."""
    for name, (path, per_shard) in datasets.items():
        for workers, start in _worker_starts(args.worker_counts, args.worker_start, r):
            for open_first in (False, True) if name == "droid" and workers == 0 else (False,):
                batches = args.batches if name == "droid" else min(args.batches, 60)
                config = dict(path=str(path), open_first=open_first, workers=workers,
                              fps=scale_data.DROID_FPS, batch_size=32, batches=batches,
                              every=max(1, batches // 6), episodes_per_shard=per_shard)  # fmt: skip
                env = {"JAXLOAD_WORKER_START": start} if start else None
                got = run_in_tree(MEASURE_PLATEAU, tree, config, env=env, timeout=3600)
                key = f"{name}, {workers} workers" + (", after open" if open_first else "")
                key += f", {start}" if start and len(args.worker_start) > 1 else ""
                key += f", {side}" if side else ""
                results.setdefault(key, []).append(got)
                print(f"round {r + 1} {key}: {scale_report.brief_plateau(got)}", flush=True)


def _worker_starts(counts: list[int], starts: list[str], round_: int) -> list[tuple[int, str]]:
    """(worker count, JAXLOAD_WORKER_START) pairs of one round: each start method for every
    count with workers, their order alternating from round to round (paired A/B)."""
    order = starts if round_ % 2 == 0 else starts[::-1]
    return [(n, start) for n in counts for start in (order if n else order[:1])]


def cmd_convert(args) -> dict:
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="jaxload-scale-", dir=args.cache) as scratch:
        trees = sides(args.base, Path(scratch))
        try:
            for episodes in args.episodes:
                for per_file in args.per_file:
                    src = lerobot_source(
                        args.cache, episodes, min(per_file, episodes), args.cameras
                    )
                    first = min(args.first or episodes, episodes)
                    name = f"{episodes} episodes, {min(per_file, episodes)} per file, {args.cameras} cam"
                    name += f", the first {first}" if first < episodes else ""
                    for r in range(args.repeats):
                        for side, tree in trees if r % 2 == 0 else trees[::-1]:
                            out = Path(scratch) / f"out-{len(results)}-{r}-{side.split()[0]}"
                            selection = f"0-{first - 1}" if first < episodes else None
                            config = dict(src=str(src), out=str(out), workers=args.workers,
                                          episodes=selection)  # fmt: skip
                            got = run_in_tree(MEASURE_CONVERT, tree, config, timeout=3600)
                            got |= {"episodes": first}
                            results.setdefault(name, {}).setdefault(side, []).append(got)
                            print(f"{name} {side}: {scale_report.brief_convert(got)}", flush=True)
                            import shutil

                            shutil.rmtree(out, ignore_errors=True)
        finally:
            _remove_worktrees(trees)
    scale_report.print_convert(results)
    return results


def _remove_worktrees(trees) -> None:
    for _, tree in trees[1:]:
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(tree)], check=False
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("open", "plateau", "convert"))
    parser.add_argument("--base", default=None, help="git revision to measure side by side")
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE,
        help=f"where the datasets are written and kept (default {DEFAULT_CACHE})",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results file (JSON)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--workers", type=int, default=2,
        help="convert: processes; open: worker processes of the memory runs (0: none)",
    )  # fmt: skip
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument(
        "--alone", action="store_true", help="open: also make_loader(path) without open before"
    )
    parser.add_argument(
        "--worker-start",
        nargs="+",
        default=["forkserver"],
        choices=("forkserver", "spawn"),
        help="plateau: how workers start (JAXLOAD_WORKER_START); two: side by side, alternating",
    )
    parser.add_argument(
        "--worker-counts", type=int, nargs="+", default=[0, 2, 4], help="plateau: worker counts"
    )
    parser.add_argument(
        "--datasets", nargs="+", choices=("droid", "100k", "empty"),
        default=["droid", "100k", "empty"], help="open, plateau: which datasets (plateau: droid, empty)",
    )  # fmt: skip
    parser.add_argument("--episodes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--per-file", type=int, nargs="+", default=[1000])
    parser.add_argument("--cameras", type=int, default=0)
    parser.add_argument("--first", type=int, default=None, help="convert: only these episodes")
    parser.add_argument("--tag", default=None, help="its key in the results file (default: what)")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    from jaxload.tools import bench

    commands = {"open": cmd_open, "plateau": cmd_plateau, "convert": cmd_convert}
    results = commands[args.what](args)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {}
    doc[args.tag or args.what] = {
        "command": "python benchmarks/bench_scale.py " + " ".join(argv or sys.argv[1:]),
        "machine": bench.machine_info(),
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "results": results,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
