"""Training parity: the same small vision policy trained on LeRobotDataset's frames, on
jaxload's default conversion (exact frames) and on the `--video-codec h264` re-encode.

    python benchmarks/bench_train_parity.py                  # ~10 min on 2 cores
    python benchmarks/bench_train_parity.py --steps 60 --episodes 4   # a smoke run

A footage-like LeRobot source (one 480x640 AV1 camera as lerobot writes it, sensor noise,
a moving textured scene; tests/support/lerobot_factory.py) is converted twice. Each arm
reads the same frames (every frame of the training episodes, read once per arm into
memory: LeRobotDataset[i] for the LeRobot arm, jaxload.open(...)[i] for the others), and
trains the same model (flax: a strided conv encoder and an MLP head predicting the action
from the image) with the same seeds, batches and steps; the held-out loss is measured on
the last episodes' frames as LeRobotDataset decodes them (what the policy would see from
the source). Prints per arm the mean and the spread over seeds, and the frames' PSNR
against LeRobot's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

CAM = "observation.images.top"
POOL = 8  # 480x640 frames are averaged to 60x80 before the encoder (CPU-sized)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=8, help="of 40 frames; the last 2 held out")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--noise", type=float, default=8.0)
    parser.add_argument("--work", type=Path, help="where the datasets go (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    return parser.parse_args(argv)


def make_datasets(work: Path, episodes: int, noise: float) -> dict[str, Path]:
    """The LeRobot source and its two conversions."""
    from jaxload.converters.convert import convert
    from tests.support.lerobot_factory import write_lerobot_v3

    src = write_lerobot_v3(
        work / "src",
        fps=30,
        episode_lengths=[40] * episodes,
        cameras={CAM: (480, 640)},
        video_codec="av1",
        noise=noise,
        episodes_per_video_file=4,
    )
    out = {"lerobot": src}
    for arm, codec in (("jaxload_default", None), ("jaxload_h264", "h264")):
        report = convert(src, work / arm, video_codec=codec, workers=2, progress=False)
        out[arm] = report.out
    return out


def read_frames(arm: str, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(frames (N, 480, 640, 3) uint8, pooled (N, 60, 80, 3) float32 in [0, 1], actions[1:4]
    (N, 3), episode index (N,)) of every frame."""
    if arm == "lerobot":
        from jaxload.tools.bench.lerobot import import_lerobot_dataset

        ds = import_lerobot_dataset()("bench/parity", root=path)
        items = [ds[i] for i in range(len(ds))]
        images = [np.rint(np.moveaxis(x[CAM].numpy(), 0, -1) * 255).astype(np.uint8) for x in items]
        actions = [x["action"].numpy()[1:4] for x in items]
        episodes = [int(x["episode_index"]) for x in items]
    else:
        import jaxload

        ds = jaxload.open(path)
        items = ds.__getitems__(range(len(ds)))
        images = [x[CAM] for x in items]
        actions = [x["action"][1:4] for x in items]
        episodes = [int(x["episode_index"]) for x in items]
    full = np.stack(images)
    pooled = full.reshape(len(full), 480 // POOL, POOL, 640 // POOL, POOL, 3).mean((2, 4))
    return full, pooled.astype(np.float32) / 255.0, np.stack(actions), np.asarray(episodes)


def train(images, actions, heldout_images, heldout_actions, seed: int, steps: int, batch: int):
    """Held-out MSE of the policy trained `steps` steps on (images, actions) with `seed`."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    class Policy(nn.Module):
        @nn.compact
        def __call__(self, x):
            for features in (16, 32, 64):
                x = nn.relu(nn.Conv(features, (3, 3), strides=(2, 2))(x))
            x = x.mean(axis=(1, 2))
            return nn.Dense(3)(nn.relu(nn.Dense(64)(x)))

    model = Policy()
    params = model.init(jax.random.PRNGKey(seed), images[:1])
    optimizer = optax.adam(1e-3)
    state = optimizer.init(params)

    def loss_fn(p, x, y):
        return jnp.mean((model.apply(p, x) - y) ** 2)

    @jax.jit
    def step(p, s, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    order = np.random.default_rng(seed)  # the same batches for every arm
    for _ in range(steps):
        rows = order.integers(0, len(images), size=batch)
        params, state, _ = step(params, state, images[rows], actions[rows])
    return float(jax.jit(loss_fn)(params, heldout_images, heldout_actions))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def main(argv=None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        paths = make_datasets(work, args.episodes, args.noise)
        print(f"datasets in {time.perf_counter() - began:.0f} s", flush=True)
        data = {arm: read_frames(arm, path) for arm, path in paths.items()}
    reference_full, reference, _, episodes = data["lerobot"]
    heldout = episodes >= args.episodes - 2
    results = {}
    for arm, (full, images, actions, _) in data.items():
        frame_psnr = [psnr(a, b) for a, b in zip(full, reference_full)]
        losses = [
            train(
                images[~heldout],
                actions[~heldout],
                reference[heldout],
                data["lerobot"][2][heldout],
                seed,
                args.steps,
                args.batch_size,
            )
            for seed in args.seeds
        ]
        results[arm] = {
            "heldout_mse": losses,
            "mean": float(np.mean(losses)),
            "std": float(np.std(losses)),
            "frames_psnr_vs_lerobot_min": None if min(frame_psnr) == np.inf else min(frame_psnr),
            "frames_identical_to_lerobot": bool(np.array_equal(full, reference_full)),
        }
        print(
            f"{arm:16s} held-out MSE {np.mean(losses):.5f} +- {np.std(losses):.5f} "
            f"(seeds {args.seeds}: {', '.join(f'{x:.5f}' for x in losses)}); frames vs "
            f"LeRobot: {'identical' if results[arm]['frames_identical_to_lerobot'] else f'min PSNR {min(frame_psnr):.2f} dB'}",
            flush=True,
        )
    print(f"total {time.perf_counter() - began:.0f} s")
    if args.out:
        args.out.write_text(
            json.dumps(
                {"args": vars(args) | {"work": None, "out": None}, "results": results}, indent=2
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
