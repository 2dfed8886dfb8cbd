"""GPU decoding, measured side by side in one run: accuracy against the CPU, the NVDEC and
CPU-worker limits, and the loader on each path feeding a jitted step.

    python benchmarks/bench_gpu.py                                   # on a GPU machine
    python benchmarks/bench_gpu.py --device device --sizes small --quick --tiny  # CPU dry run
    bash scripts/gpu_check.sh          # the project's GPU command: tests, then this per size

For each size (small 96x128, policy 224x224, large 480x640; two cameras; LeRobot AV1
sources converted to H.264 with the default GOP; `--hevc` adds HEVC conversions to the
accuracy check) it reports:

1. accuracy: every frame of the first batches decoded on the device (jaxload's decode
   path, torchcodec's NVDEC backend) against the CPU decode: the largest absolute
   difference (the target: <= 3 levels), windows with padded slots included;
2. the NVDEC limit: the loader's batches decoded on all devices by the `DeviceDecoder`
   with `decode_threads` decodes in flight per GPU and nothing else (frames/s);
3. the CPU-worker limit: the loader with decode_device="cpu", no step (samples/s);
4. the loader with decode_device "cuda", "cpu" and "auto" feeding a jitted conv policy
   whose step takes >= --min-step-ms: samples/s, the share of wall time the step loop
   waited for data, the first batch's time, and the growth of the devices' memory in use
   over the run.

The ratios the issue asks for (NVDEC loader / NVDEC limit, auto / best) are printed at the
end; everything goes to benchmarks/results_gpu.json, which
is rewritten after every stage, so a size cut short by --deadline keeps what it measured
(`summarize` makes the figures of whatever stages there are).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

SIZES = {"small": (96, 128, 50), "policy": (224, 224, 24), "large": (480, 640, 12)}
# --tiny: 4 episodes of 10-80 frames (~170 frames) instead of the size's: a dry run's
# dataset, generated and converted in seconds (the small one takes ~2 minutes on 2 cores).
TINY = {"episodes": 4, "min_length": 10, "max_length": 80}
WINDOWS = {
    "action": [k / 30 for k in range(16)],
    "observation.state": [-2 / 30, -1 / 30, 0.0],
    "observation.images.top": [-1 / 30, 0.0],  # padded at each episode's first frame
    "observation.images.wrist": [0.0],
}
CAMERAS = ("observation.images.top", "observation.images.wrist")
PATHS = ("cuda", "cpu", "auto")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    if args.deadline:  # a stall becomes every thread's stack in the log, not a silent kill
        faulthandler.dump_traceback_later(args.deadline, exit=True)
    results: list[dict] = []
    for name in args.sizes:
        codecs = datasets(name, args)
        done = bench_size(
            name, codecs["h264"], codecs, args, save=lambda out: write(args.out, [*results, out])
        )
        results.append(done)
        print(json.dumps(results[-1]["summary"]), flush=True)
    write(args.out, results)
    print(f"wrote {args.out}")
    return 0


def write(path: Path, results: list[dict]) -> None:
    """The results so far, replacing the file whole (a deadline may stop the process)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(tmp, path)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=sorted(SIZES))
    p.add_argument(
        "--device", default="cuda", choices=["cuda", "device"], help="'device': CPU dry run"
    )
    p.add_argument("--batch-size", type=int, default=64, help="global batch size")
    p.add_argument("--seconds", type=float, default=15.0, help="timed loading per path")
    p.add_argument("--min-step-ms", type=float, default=20.0, help="model step time to aim for")
    p.add_argument(
        "--workers", type=int, default=None, help="Grain workers (default: the loader's)"
    )
    p.add_argument("--hevc", action="store_true", help="also check HEVC conversions' accuracy")
    p.add_argument("--quick", action="store_true", help="a few seconds per path (dry runs)")
    p.add_argument(
        "--tiny", action="store_true", help="a dataset of 4 short episodes per size (dry runs)"
    )
    p.add_argument("--cache", default=str(REPO_ROOT / "runs" / "bench"))
    p.add_argument(
        "--datasets", type=Path, default=None, help="converted datasets carried to a GPU host"
    )
    p.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_gpu.json")
    p.add_argument("--skip-accuracy", action="store_true", help="no accuracy check")
    p.add_argument("--skip-one-thread", action="store_true", help="no one-thread NVDEC limit")
    p.add_argument("--deadline", type=float, default=0, help="dump stacks and exit after (s)")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds = 3.0
    return args


def datasets(name: str, args: argparse.Namespace) -> dict[str, Path]:
    """The converted datasets of size `name` by codec: made here (benchmarks/bench_data.py,
    which needs the converter) or, with --datasets, carried to a GPU host
    (benchmarks/gpu_carry.py: `<dir>/<size>-<codec>`)."""
    codecs = ["h264", "hevc"] if args.hevc else ["h264"]
    if args.datasets is not None:  # HEVC where it was carried
        found = {c: args.datasets / f"{name}-{c}" for c in codecs}
        return {c: path for c, path in found.items() if c == "h264" or path.is_dir()}
    from benchmarks.bench_data import DatasetSpec, prepare

    height, width, episodes = SIZES[name]
    extent = TINY if args.tiny else {"episodes": episodes}
    spec = DatasetSpec(name, height, width, **extent)
    # Re-encoded: the default conversion copies the AV1 sources, which NVDEC on
    # A100/H100/H200 cannot decode.
    out = {"h264": prepare(spec, Path(args.cache), video_codec="h264")[1]}
    if args.hevc:
        out["hevc"] = prepare(spec, Path(args.cache), video_codec="hevc")[1]
    return out


def bench_size(
    name: str, dataset: Path, codecs: dict, args: argparse.Namespace, save=lambda out: None
) -> dict:
    """Every stage on one size; `save(out)` after each (what a deadline leaves)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    auto = (jax.sharding.AxisType.Auto,)  # let XLA place the step's gradient reductions
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=auto)
    sharding = NamedSharding(mesh, P("data"))
    out = {"size": name, "devices": [str(d) for d in jax.devices()]}

    def stage(label: str, value, key: str | None = None) -> None:
        if key is not None:
            out[key] = value
        _progress(name, label, value)
        out["summary"] = summarize(out)
        save(out)

    accuracy_max_abs = (
        {}
        if args.skip_accuracy
        else {c: accuracy(path, sharding, args) for c, path in codecs.items()}
    )
    stage("accuracy", accuracy_max_abs, "accuracy_max_abs")
    limit = device_limit(dataset, sharding, args)
    stage("nvdec limit frames/s", limit, "nvdec_limit_frames_per_s")
    one = 0.0 if args.skip_one_thread else device_limit(dataset, sharding, args, threads=1)
    stage("nvdec one thread frames/s", one, "nvdec_one_thread_frames_per_s")
    cpu = loader_run(dataset, sharding, "cpu", args, step=False)["samples_per_s"]
    stage("cpu limit samples/s", cpu, "cpu_limit_samples_per_s")
    out["loader"] = {}
    for path in ("device", "cpu") if args.device == "device" else PATHS:
        out["loader"][path] = loader_run(dataset, sharding, path, args)
        stage(f"loader {path}", out["loader"][path])
    return out


FRAMES_PER_SAMPLE = 3  # two top frames and one wrist frame (WINDOWS)


def summarize(out: dict) -> dict:
    """The figures of one size's results, as far as its stages went: accuracy, the NVDEC
    and CPU limits, each loader path, and the ratios the issue asks for."""
    summary: dict = {"size": out["size"]}
    if "accuracy_max_abs" in out:
        summary["accuracy_max_abs"] = out["accuracy_max_abs"]
    loader = out.get("loader", {})
    nvdec = out.get("nvdec_limit_frames_per_s")
    gpu_path = loader.get("cuda", loader.get("device"))
    if nvdec and gpu_path:
        summary["nvdec_loader_vs_limit"] = gpu_path["samples_per_s"] / (nvdec / FRAMES_PER_SAMPLE)
    if nvdec is not None:
        summary["nvdec_frames_per_s"] = {"all_threads": round(nvdec)}
        if "nvdec_one_thread_frames_per_s" in out:
            one = out["nvdec_one_thread_frames_per_s"]
            summary["nvdec_frames_per_s"]["one_thread"] = round(one)
    cpu = out.get("cpu_limit_samples_per_s")
    if cpu is not None:
        summary["cpu_limit_samples_per_s"] = round(cpu)
    if loader:
        summary["samples_per_s"] = {p: round(r["samples_per_s"]) for p, r in loader.items()}
        summary["wait_fraction"] = {p: round(r["wait_fraction"], 3) for p, r in loader.items()}
        summary["first_batch_s"] = {p: round(r["first_batch_s"], 2) for p, r in loader.items()}
        summary["memory_growth"] = {p: r["memory_growth"] for p, r in loader.items()}
    best = [r["samples_per_s"] for p, r in loader.items() if p != "auto"]
    if "auto" in loader and best:
        summary["auto_vs_best"] = loader["auto"]["samples_per_s"] / max(best)
    return summary


def _progress(size: str, stage: str, value) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {size} {stage}: {value}", flush=True)


def accuracy(dataset: Path, sharding, args: argparse.Namespace) -> int:
    """The largest |device - CPU| over every frame of the first batches (0..255)."""
    import jaxload

    kw = dict(
        global_batch_size=args.batch_size, seed=1, sharding=sharding, delta_timestamps=WINDOWS
    )
    on_cpu = jaxload.make_loader(dataset, options=jaxload.PipelineOptions(num_workers=0), **kw)
    decode = "cuda" if args.device == "cuda" else "device"
    options = jaxload.PipelineOptions(num_workers=0)
    on_device = jaxload.make_loader(dataset, decode_device=decode, options=options, **kw)
    worst = 0
    with on_cpu, on_device:
        for _ in range(4 if args.quick else 16):
            want, got = next(on_cpu), next(on_device)
            for key in CAMERAS:
                diff = np.abs(np.asarray(got[key]).astype(np.int16) - np.asarray(want[key]))
                worst = max(worst, int(diff.max()))
    return worst


def device_limit(dataset: Path, sharding, args: argparse.Namespace, threads=None) -> float:
    """Frames/s of the devices decoding the loader's batches (DeviceDecoder, every device
    and decode thread busy), nothing else: the readers' work is done beforehand."""
    import jaxload
    from jaxload.batch import hosts
    from jaxload.decode.on_device import DeviceDecoder

    decode = "cuda" if args.device == "cuda" else "device"
    options = jaxload.PipelineOptions(num_workers=0)
    loader = jaxload.make_loader(
        dataset,
        global_batch_size=args.batch_size,
        seed=2,
        sharding=sharding,
        delta_timestamps=WINDOWS,
        decode_device=decode,
        options=options,
    )
    spec = loader.spec
    read = loader.read_batch()
    batches = [read.map(k) for k in range(8)]
    loader.close()
    shapes = {k: spec.schema.fields[k].shape for k in CAMERAS}
    decoder = DeviceDecoder(threads or spec.placement.decode_threads, timeout_s=600)

    def sharding_for(ndim: int):
        return hosts.sharding_for_rank(sharding, ndim)

    def decode_all(batch: dict) -> None:
        cameras = {k: batch[k] for k in CAMERAS}
        arrays = decoder.decode_to_global(cameras, shapes, sharding_for, spec.rows, len(spec.rows))
        for a in arrays.values():
            a.block_until_ready()

    decode_all(batches[0])  # decoders, caches
    frames, began = 0, time.perf_counter()
    while time.perf_counter() - began < args.seconds:
        for batch in batches:
            decode_all(batch)
            frames += sum(batch[k].gop_index.size for k in CAMERAS)
    decoder.close()
    return frames / (time.perf_counter() - began)


def loader_run(dataset: Path, sharding, path: str, args: argparse.Namespace, step=True) -> dict:
    """The loader on `path` for args.seconds, feeding the jitted step (or nothing)."""
    import jax

    import jaxload

    options = jaxload.PipelineOptions(num_workers=args.workers)
    opened = time.perf_counter()
    loader = jaxload.make_loader(
        dataset,
        global_batch_size=args.batch_size,
        seed=3,
        sharding=sharding,
        delta_timestamps=WINDOWS,
        decode_device=path,
        options=options,
    )
    first = next(loader)
    jax.block_until_ready(first)
    first_s = time.perf_counter() - opened
    update, state = _model(first, sharding, args.min_step_ms) if step else (None, None)
    memory = [_in_use()]
    waited, samples = 0.0, 0
    began = time.perf_counter()
    with loader:
        while time.perf_counter() - began < args.seconds:
            t = time.perf_counter()
            batch = next(loader)
            waited += time.perf_counter() - t
            if update is not None:
                state = update(state, _arrays(batch))
            else:
                jax.block_until_ready(batch)
            samples += args.batch_size
            memory.append(_in_use())
        jax.block_until_ready(state)
        wall = time.perf_counter() - began
        closing = time.perf_counter()
    close_s = round(time.perf_counter() - closing, 2)
    growth = None
    if memory[1:] and memory[1]:
        growth = round(max(memory[1:]) / memory[1] - 1, 3)
    return {
        "decode_device": loader.options.decode_device,
        "samples_per_s": samples / wall,
        "wait_fraction": waited / wall,
        "first_batch_s": first_s,
        "auto_choice": None
        if loader.spec.placement.choice is None
        else loader.spec.placement.choice.describe(),
        "close_s": close_s,
        "memory_growth": growth,
    }


def _in_use() -> int:
    """Bytes in use on the first device (0 where the backend does not say)."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return int(stats.get("bytes_in_use", 0))


def _model(batch: dict, sharding, min_step_ms: float):
    """A conv policy over both cameras, widened until one step takes >= min_step_ms."""
    import jax
    import jax.numpy as jnp

    def init(width: int):
        k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
        return {
            "conv1": jax.random.normal(k1, (5, 5, 3, width)) * 0.05,
            "conv2": jax.random.normal(k2, (3, 3, width, width)) * 0.05,
            "head": jax.random.normal(k3, (2 * width, 16 * 8)) * 0.05,
        }

    def loss(params, batch):
        feats = []
        for key in CAMERAS:
            x = batch[key].astype(jnp.float32) / 255.0
            if x.ndim == 5:  # (B, T, H, W, C): the latest frame
                x = x[:, -1]
            for w in (params["conv1"], params["conv2"]):
                x = jax.nn.relu(
                    jax.lax.conv_general_dilated(
                        x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
                    )
                )
            feats.append(x.mean(axis=(1, 2)))
        pred = jnp.concatenate(feats, -1) @ params["head"]
        return jnp.mean((pred - batch["action"].reshape(pred.shape[0], -1)) ** 2)

    replicated = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())

    def update(params, batch):
        grads = jax.grad(loss)(params, batch)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)

    step = jax.jit(update, out_shardings=replicated)
    batch = _arrays(batch)
    width = 16
    while True:
        params = step(init(width), batch)
        jax.block_until_ready(params)
        t = time.perf_counter()
        for _ in range(3):
            params = step(params, batch)
        jax.block_until_ready(params)
        if (time.perf_counter() - t) / 3 * 1000 >= min_step_ms or width >= 512:
            return step, params
        width *= 2


def _arrays(batch: dict) -> dict:
    """The batch without host-side strings, for the jitted step."""
    return {k: v for k, v in batch.items() if getattr(v, "dtype", np.dtype("O")).kind not in "USO"}


if __name__ == "__main__":
    raise SystemExit(main())
