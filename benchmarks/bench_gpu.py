"""GPU decode benchmark: torchcodec CUDA decode alone vs the loader feeding a pjit'ed step.

    python benchmarks/bench_gpu.py                    # on a GPU machine: NVDEC ("cuda")
    python benchmarks/bench_gpu.py --decode-device device --sizes small   # dry run on CPU

For each size (small 96x128, large 480x640; two cameras; LeRobot AV1 sources converted to
H.264 with the default GOP) it reports, in one run:

1. the decode limit: torchcodec on the device decoding exactly the frames of the batches
   the loader serves (one decoder per camera and batch, as the loader does), nothing else;
2. the loader (`make_loader(decode_device=...)`, batches sharded over all devices) feeding a
   small pjit'ed convolutional policy whose step takes >= --min-step-ms: frames/s, the
   fraction of wall time the step loop waited for data, and GPU utilisation (nvidia-smi,
   sampled every 100 ms, when present);

and the ratio loader / decode limit. Results go to stdout and benchmarks/results_gpu.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

SIZES = {"small": (96, 128, 50), "large": (480, 640, 12)}  # as benchmarks/run.py


def main() -> None:
    args = _parse()
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    from benchmarks.bench_data import DatasetSpec, prepare

    results = []
    for name in args.sizes:
        height, width, episodes = SIZES[name]
        _, dataset = prepare(DatasetSpec(name, height, width, episodes), Path(args.cache))
        results.append(bench_size(name, dataset, args))
        print(_line(results[-1]), flush=True)
    out = REPO_ROOT / "benchmarks" / "results_gpu.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", nargs="+", default=["small", "large"], choices=sorted(SIZES))
    p.add_argument("--decode-device", default="cuda", choices=["cuda", "device", "auto"])
    p.add_argument("--batch-size", type=int, default=64, help="global batch size")
    p.add_argument("--batches", type=int, default=40, help="measured batches (after warm-up)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--min-step-ms", type=float, default=20.0, help="model step time to aim for")
    p.add_argument("--workers", type=int, default=None, help="Grain workers (default: autotune)")
    p.add_argument("--cache", default=str(REPO_ROOT / "runs" / "bench"))
    return p.parse_args()


def bench_size(name: str, dataset: Path, args: argparse.Namespace) -> dict:
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxload

    windows = {
        "action": [k / 30 for k in range(16)],
        "observation.state": [-2 / 30, -1 / 30, 0.0],
        "observation.images.top": [-1 / 30, 0.0],
        "observation.images.wrist": [0.0],
    }
    auto = (jax.sharding.AxisType.Auto,)  # let XLA place the step's gradient reductions
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=auto)
    sharding = NamedSharding(mesh, P("data"))
    device = "cuda:0" if args.decode_device in ("cuda", "auto") else "cpu"
    limit = decode_limit(dataset, windows, args, device)
    loader = jaxload.make_loader(
        str(dataset),
        global_batch_size=args.batch_size,
        delta_timestamps=windows,
        sharding=sharding,
        decode_device=args.decode_device,
        options=jaxload.PipelineOptions(num_workers=args.workers, autotune=args.workers is None),
    )
    step, state = _model(loader, sharding, args.min_step_ms)
    with loader, GpuUtilisation() as util:
        for _ in range(args.warmup):
            state = step(state, _arrays(next(loader)))
        jax.block_until_ready(state)
        waited = 0.0
        start = time.perf_counter()
        for _ in range(args.batches):
            t = time.perf_counter()
            batch = next(loader)
            waited += time.perf_counter() - t
            state = step(state, _arrays(batch))
        jax.block_until_ready(state)
        wall = time.perf_counter() - start
    frames = args.batches * args.batch_size * 3  # 2 top + 1 wrist frame per sample
    return {
        "size": name,
        "devices": [str(d) for d in jax.devices()],
        "decode_device": loader.options.decode_device,
        "decode_limit_frames_per_s": limit,
        "loader_frames_per_s": frames / wall,
        "loader_vs_limit": frames / wall / limit,
        "wait_fraction": waited / wall,
        "step_ms": 1000 * wall / args.batches,
        "gpu_utilisation": util.mean,
    }


def decode_limit(dataset: Path, windows: dict, args: argparse.Namespace, device: str) -> float:
    """Frames/s of torchcodec on `device` decoding the loader's first batches, nothing else."""
    import jaxload

    ds = jaxload.open(dataset, delta_timestamps=windows)
    loader = jaxload.make_loader(
        ds,
        global_batch_size=args.batch_size,
        host_index=0,
        host_count=1,
        options=jaxload.PipelineOptions(num_workers=0),
    )
    with loader:
        batches = [next(loader)["index"] for _ in range(args.warmup + args.batches)]
    encoded = [ds.read_encoded(b)[1] for b in batches]  # reading is not part of the limit
    for videos in encoded[: args.warmup]:
        for video in videos.values():
            video.decode(device, as_torch=True)
    frames = 0
    start = time.perf_counter()
    for videos in encoded[args.warmup :]:
        for video in videos.values():
            out = video.decode(device, as_torch=True)
            frames += out.shape[0] * out.shape[1]
    _synchronize(device)
    return frames / (time.perf_counter() - start)


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _model(loader, sharding, min_step_ms: float):
    """A conv policy over both cameras; widened until one step takes >= min_step_ms."""
    import jax
    import jax.numpy as jnp

    def init(width: int):
        key = jax.random.PRNGKey(0)
        k1, k2, k3 = jax.random.split(key, 3)
        return {
            "conv1": jax.random.normal(k1, (5, 5, 3, width)) * 0.05,
            "conv2": jax.random.normal(k2, (3, 3, width, width)) * 0.05,
            "head": jax.random.normal(k3, (2 * width, 16 * 8)) * 0.05,
        }

    def loss(params, batch):
        feats = []
        for key in ("observation.images.top", "observation.images.wrist"):
            x = batch[key].astype(jnp.float32) / 255.0
            if x.ndim == 5:  # (B, T, H, W, C): the latest frame (keeps the batch axis intact)
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

    step = jax.jit(update, out_shardings=replicated)  # parameters replicated, batch sharded

    batch = _arrays(next(loader))
    width = 16
    while True:
        params = init(width)
        params = step(params, batch)
        jax.block_until_ready(params)
        t = time.perf_counter()
        for _ in range(3):
            params = step(params, batch)
        jax.block_until_ready(params)
        ms = (time.perf_counter() - t) / 3 * 1000
        if ms >= min_step_ms or width >= 512:
            return step, params
        width *= 2


class GpuUtilisation:
    """Mean GPU utilisation (%) from nvidia-smi while the block runs; None without one."""

    def __init__(self, period_s: float = 0.1):
        self.period_s, self.samples, self.mean = period_s, [], None
        self._stop = threading.Event()

    def __enter__(self) -> GpuUtilisation:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.mean = float(np.mean(self.samples)) if self.samples else None

    def _run(self) -> None:
        query = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
        while not self._stop.wait(self.period_s):
            try:
                out = subprocess.run(query, capture_output=True, text=True, timeout=2).stdout
            except (OSError, subprocess.TimeoutExpired):
                return
            values = [float(v) for v in out.split() if v.strip().replace(".", "").isdigit()]
            if values:
                self.samples.append(np.mean(values))


def _arrays(batch: dict) -> dict:
    """The batch without its host-side strings ("task"), for the jitted step."""
    return {k: v for k, v in batch.items() if getattr(v, "dtype", np.dtype("O")).kind not in "USO"}


def _line(r: dict) -> str:
    util = "n/a" if r["gpu_utilisation"] is None else f"{r['gpu_utilisation']:.0f}%"
    return (
        f"{r['size']}: decode limit {r['decode_limit_frames_per_s']:.0f} frames/s, loader "
        f"{r['loader_frames_per_s']:.0f} frames/s ({r['loader_vs_limit']:.0%} of the limit), "
        f"waiting {r['wait_fraction']:.1%} of {r['step_ms']:.1f} ms steps, GPU {util}, "
        f"decode on {r['decode_device']}"
    )


if __name__ == "__main__":
    main()
