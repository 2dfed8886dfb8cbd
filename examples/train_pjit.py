"""Train a small policy with a pjit'ed step on jaxload batches; save and resume with Orbax.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python examples/train_pjit.py
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python examples/train_pjit.py --restore

Converts the bundled LeRobot example (two AV1 cameras) once, then trains a convolutional
policy (flax linen + optax) that predicts a chunk of future actions from both cameras
and the state, at a model resolution of 64x64 with augmentation: every camera gets a
random resized crop and colour jitter keyed by (seed, sample position), so a restored
run sees the very pixels the uninterrupted one saw (`--transforms-on device` runs them
jitted on the devices after decode instead of in the readers). The batch is sharded over a 1-D mesh of all devices ("data"); parameters
are replicated (see main() for why). The loader yields only the keys the step reads
(`keys=`), so each batch goes into the jitted step as it is. Every --save-every steps
the model, optimizer and loader state go into
one Orbax checkpoint; --restore continues from the latest one, and because the loader
resumes exactly, a killed-and-restored run ends with the same parameters, bit for bit
on CPU, as an uninterrupted one. Runs unchanged on GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxload
from jaxload import PipelineOptions, make_loader
from jaxload.checkpoint import LoaderRestore, LoaderSave
from jaxload.transforms import ColorJitter, ImageTransforms, Normalize, RandomResizedCrop

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "data" / "lerobot_av1_demo"
CAMERAS = ("observation.images.top", "observation.images.wrist")
CHUNK = 4  # future actions predicted per sample
IMAGE_SIZE = (64, 64)  # the model's input resolution; both cameras are resized to it
AUGMENT = ImageTransforms(
    [
        RandomResizedCrop(IMAGE_SIZE, scale=(0.8, 1.0), ratio=(1.0, 1.5)),
        ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2, hue=0.03),
    ]
)


class Policy(nn.Module):
    """Per camera: 2x average pooling, two strided convs and a mean pool; then an MLP."""

    action_dim: int

    @nn.compact
    def __call__(self, images: list[jax.Array], state: jax.Array) -> jax.Array:
        feats = [state]
        for image in images:
            x = nn.avg_pool(image.astype(jnp.float32) / 255.0, (2, 2), strides=(2, 2))
            x = nn.relu(nn.Conv(16, (3, 3), strides=(2, 2))(x))
            x = nn.relu(nn.Conv(32, (3, 3), strides=(2, 2))(x))
            feats.append(x.mean(axis=(1, 2)))
        x = jnp.concatenate(feats, axis=-1)
        x = nn.relu(nn.Dense(128)(x))
        return nn.Dense(CHUNK * self.action_dim)(x).reshape(-1, CHUNK, self.action_dim)


def convert_once(source: Path, out: Path) -> None:
    """Convert the LeRobot source to a jaxload dataset unless that was done already."""
    if (out / "meta" / "info.json").exists():
        return
    from jaxload.converters.convert import convert

    print(convert(source, out, progress=False).summary(), flush=True)


def make_train_step(model: Policy, tx: optax.GradientTransformation):
    def loss_fn(params, batch):
        # State and action arrive z-scored: Normalize ran in the loader's worker processes.
        pred = model.apply(params, [batch[c] for c in CAMERAS], batch["observation.state"])
        target = batch["action"]
        valid = (~batch["action_is_pad"]).astype(jnp.float32)[..., None]
        return ((pred - target) ** 2 * valid).sum() / (valid.sum() * target.shape[-1])

    def train_step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def params_digest(params) -> str:
    """sha256 over every parameter's bytes: equal digests mean bitwise-equal parameters."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        h.update(np.asarray(leaf).tobytes())
    return h.hexdigest()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--source", type=Path, default=SOURCE, help="LeRobot dataset to convert")
    p.add_argument("--workdir", type=Path, default=Path("runs/train_pjit"))
    p.add_argument("--dataset", type=Path, help="converted dataset (default: WORKDIR/dataset)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32, help="global batch size")
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--workers", type=int, default=None, help="Grain worker processes (default: jaxload's)"
    )
    p.add_argument(
        "--decode-device",
        default="cpu",
        choices=("cpu", "cuda", "device"),
        help="cpu: decode in the workers; cuda: each GPU decodes its rows (NVDEC)",
    )
    p.add_argument(
        "--transforms-on",
        choices=["auto", "cpu", "device"],
        default="auto",
        help="where the image transforms run (auto: on the devices when they decode)",
    )
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--restore", action="store_true", help="resume from the latest checkpoint")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    dataset_dir = args.dataset or args.workdir / "dataset"
    convert_once(args.source, dataset_dir)
    fps = jaxload.open(dataset_dir).fps

    # Explicit axes (jax.make_mesh's default in current JAX): a sharding is part of each
    # array's type. Batches are sharded over "data" on their first axis; parameters and
    # optimizer state are replicated (P()) so every device holds them whole. Replication
    # is what data parallelism means, and under Explicit axes it is also required: a
    # gradient contracts the sharded batch axis, and JAX takes the gradient's sharding from
    # the parameter's; parameters left on one device raise "ShardingTypeError: Contracting
    # dimensions are sharded ...".
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))
    data_sharding = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    loader = make_loader(
        dataset_dir,
        global_batch_size=args.batch_size,
        seed=args.seed,
        delta_timestamps={"action": [k / fps for k in range(CHUNK)]},
        sharding=data_sharding,
        options=PipelineOptions(num_workers=args.workers),
        decode_device=args.decode_device,
        batch_transform=Normalize.from_datasets(
            dataset_dir, {"observation.state": "mean_std", "action": "mean_std"}
        ),
        keys=["observation.state", "action", "action_is_pad", *CAMERAS],  # what the step reads
        image_transforms=AUGMENT,
        image_transforms_on=args.transforms_on,
    )
    loader.start()  # imports and first batches overlap the model set-up below
    print(loader, flush=True)
    spec = loader.element_spec
    model = Policy(action_dim=spec["action"].shape[-1])
    tx = optax.adam(args.lr)

    example = [jnp.zeros((1, *spec[c].shape[1:]), jnp.uint8) for c in CAMERAS]
    params = model.init(
        jax.random.key(args.seed), example, jnp.zeros((1, *spec["observation.state"].shape[1:]))
    )
    params = jax.device_put(params, replicated)
    opt_state = jax.device_put(tx.init(params), replicated)
    step_fn = jax.jit(
        make_train_step(model, tx),
        in_shardings=(replicated, replicated, data_sharding),
        out_shardings=(replicated, replicated, replicated),
        donate_argnums=(0, 1),
    )

    mngr = ocp.CheckpointManager(
        (args.workdir / "ckpt").absolute(), options=ocp.CheckpointManagerOptions(max_to_keep=2)
    )
    step = 0
    if args.restore and mngr.latest_step() is not None:
        step = mngr.latest_step()
        target = {"params": params, "opt_state": opt_state}
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        restored = mngr.restore(
            step,
            args=ocp.args.Composite(
                model=ocp.args.StandardRestore(abstract), loader=LoaderRestore(loader)
            ),
        )
        params, opt_state = restored.model["params"], restored.model["opt_state"]
        print(
            f"restored step {step} (loader at sample {loader.position}, epoch {loader.epoch})",
            flush=True,
        )

    losses, started = [], time.perf_counter()
    while step < args.steps:
        params, opt_state, loss = step_fn(params, opt_state, next(loader))
        step += 1
        losses.append(loss)  # a device array: reading it every step would sync the host
        if step % args.log_every == 0 or step == args.steps:
            rate = len(losses) / (time.perf_counter() - started)
            print(f"step {step} loss {float(loss):.4f} ({rate:.1f} steps/s)", flush=True)
        if step % args.save_every == 0 or step == args.steps:
            mngr.save(
                step,
                args=ocp.args.Composite(
                    model=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
                    loader=LoaderSave(loader),
                ),
            )
            print(f"saved step {step}", flush=True)
    mngr.wait_until_finished()
    mngr.close()
    loader.close()
    if len(losses) >= 20:
        losses = np.asarray(jax.device_get(losses))
        print(f"loss first10 {losses[:10].mean():.4f} last10 {losses[-10:].mean():.4f}")
    print(f"final step {step} params sha256 {params_digest(params)}")


if __name__ == "__main__":
    main()
