"""What image transforms cost: loader samples/s without transforms, with them on the
readers' CPUs, and with them on the devices, side by side in one run; and whether
torchcodec resizing while decoding beats decoding then resizing.

The benchmark's large dataset (2 cameras 480x640, windows of benchmarks/run.py: 3 frames
per sample), global batch 32, jaxload's default workers/threads, every camera
RandomResizedCrop((224, 224), scale=(0.8, 1)) + ColorJitter(0.3, 0.3, 0.3, 0.05).
Modes: "none" and "cpu" deliver this host's numpy batches (the transforms' CPU cost is
1 - cpu/none); "none_sharded", "cpu_sharded" and "device" deliver global jax.Arrays (as a
trainer gets them) on this machine's
CPU as JAX devices (`--devices`, default 2), so "device" measures the jitted path
competing with the readers for the same cores, not a GPU. The modes alternate for
`--rounds` rounds; medians.

    python benchmarks/bench_transforms.py [--rounds 5] [--batches 20] [--devices 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

BATCH = 32
SIZE = (224, 224)


def augment():
    from jaxload.transforms import ColorJitter, RandomResizedCrop

    return [
        RandomResizedCrop(SIZE, scale=(0.8, 1.0)),
        ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.05),
    ]


# mode -> (where the transforms run, whether batches become global jax.Arrays)
MODES = {
    "none": (None, False),
    "cpu": ("cpu", False),
    "none_sharded": (None, True),
    "cpu_sharded": ("cpu", True),
    "device": ("device", True),
}


def loader_rate(path: Path, mode: str, batches: int, sharding) -> float:
    import jax

    import jaxload
    from jaxload.tools.bench.windows import bench_windows

    on, sharded = MODES[mode]
    kw = {} if on is None else {"image_transforms": augment(), "image_transforms_on": on}
    sharding = sharding if sharded else None
    loader = jaxload.make_loader(
        path,
        global_batch_size=BATCH,
        seed=0,
        delta_timestamps=bench_windows(path),
        sharding=sharding,
        **kw,
    )
    with loader:
        for _ in range(3):  # warm-up: readers, decoders, jit
            jax.block_until_ready(next(loader))
        started = time.perf_counter()
        for _ in range(batches):
            jax.block_until_ready(next(loader))
        return BATCH * batches / (time.perf_counter() - started)


def decode_resize(path: Path, repeats: int) -> dict:
    """ms per frame: decode at 480x640; torchcodec's decoder-side Resize to 224x224;
    decode then jaxload's CPU Resize (torch's antialiased uint8 kernel)."""
    import numpy as np

    # torchcodec's decoder transforms import torchvision when it is importable; the one
    # LeRobot's install leaves here does not load against this torch. Decoder transforms
    # do not need it.
    sys.modules.setdefault("torchvision", None)
    from torchcodec.decoders import VideoDecoder
    from torchcodec.transforms import Resize

    import jaxload
    from jaxload.format.mp4 import build_mp4
    from jaxload.transforms.geometry import resize_numpy

    ds = jaxload.open(path)
    rng = np.random.default_rng(0)
    _, encoded = ds.read_encoded(rng.integers(0, len(ds), BATCH).tolist())
    video = encoded[ds.camera_keys[0]]
    mp4, counts = build_mp4(video.init, video.gops)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    indices = (firsts[video.gop_index] + video.frame_index).reshape(-1).tolist()

    def decode(transforms=None):
        decoder = VideoDecoder(
            mp4, seek_mode="exact", dimension_order="NHWC", transforms=transforms
        )
        return decoder.get_frames_at(indices=indices).data

    ways = {
        "decode": lambda: decode(),
        "decoder_side_resize": lambda: decode([Resize(SIZE)]),
        "decode_then_resize": lambda: resize_numpy(decode().numpy(), SIZE),
    }
    times = {k: [] for k in ways}
    for _ in range(repeats):
        for name, way in ways.items():
            started = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - started)
    return {
        f"{k}_ms_per_frame": 1e3 * statistics.median(v) / len(indices) for k, v in times.items()
    }


def transform_ms(path: Path, repeats: int) -> dict:
    """ms per frame of the CPU transforms alone, on decoded 480x640 frames."""
    import numpy as np

    import jaxload

    ds = jaxload.open(path)
    cam = ds.camera_keys[0]
    frames = np.stack([ds[int(i)][cam] for i in np.linspace(0, len(ds) - 1, BATCH)])
    transforms = jaxload.ImageTransforms(augment())
    times = []
    for r in range(repeats):
        started = time.perf_counter()
        transforms.apply({cam: frames}, np.arange(BATCH) + r * BATCH, seed=0)
        times.append(time.perf_counter() - started)
    return {"cpu_transform_ms_per_frame": 1e3 * statistics.median(times) / BATCH}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_transforms.json"
    )
    args = parser.parse_args()
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from benchmarks import bench_data
    from benchmarks.bench_data import LARGE

    _, path = bench_data.prepare(LARGE)
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), PartitionSpec("data"))
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode in rates:
            rates[mode].append(loader_rate(path, mode, args.batches, sharding))
        print(f"round {r}:", {k: round(v[-1], 1) for k, v in rates.items()}, flush=True)
    median = {k: statistics.median(v) for k, v in rates.items()}
    results = {
        "dataset": str(path.name),
        "samples_per_s": median,
        "samples_per_s_all": rates,
        "cpu_over_none": median["cpu"] / median["none"],
        "cpu_cost": 1 - median["cpu"] / median["none"],
        "cpu_sharded_over_none_sharded": median["cpu_sharded"] / median["none_sharded"],
        "cpu_sharded_cost": 1 - median["cpu_sharded"] / median["none_sharded"],
        "device_over_none_sharded": median["device"] / median["none_sharded"],
        **decode_resize(path, args.rounds),
        **transform_ms(path, args.rounds),
    }
    print(json.dumps(results, indent=2))
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
