"""Convert the bundled LeRobot example; print a few windowed samples and a loader batch.

    python examples/quickstart.py [--out runs/quickstart]

The bundled dataset (examples/data/lerobot_av1_demo) was written by lerobot 0.4.4: two
AV1 cameras split over several mp4 files, 14 episodes, 3 tasks.
"""

import argparse
import shutil
from pathlib import Path

import numpy as np

import jaxload
from jaxload.converters.convert import convert

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "data" / "lerobot_av1_demo"
FPS = 30
DELTA_TIMESTAMPS = {
    "action": [k / FPS for k in range(16)],  # a 16-step action chunk
    "observation.state": [-2 / FPS, -1 / FPS, 0.0],  # two past states
    "observation.images.top": [-1 / FPS, 0.0],  # two frames of the top camera
    "observation.images.wrist": [0.0],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("runs/quickstart/demo"))
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    report = convert(SOURCE, args.out)
    print(report.summary())

    ds = jaxload.open(args.out, delta_timestamps=DELTA_TIMESTAMPS)
    print(f"\n{ds}")
    for i in (0, 422, len(ds) - 1):  # the first frame, an episode start, the last frame
        sample = ds[i]
        print(
            f"\nds[{i}]: episode {int(sample['episode_index'])}, frame "
            f"{int(sample['frame_index'])}, task {sample['task']!r}"
        )
        for key, value in sample.items():
            if isinstance(value, np.ndarray) and value.ndim and not key.endswith("_is_pad"):
                pad = sample.get(f"{key}_is_pad")
                padded = f", padded slots {np.flatnonzero(pad).tolist()}" if pad is not None else ""
                print(f"  {key:28s} {value.dtype!s:8s} {value.shape}{padded}")

    # Batches hold only numeric and bool arrays, so they go into jax.jit as they are;
    # `keys=` names the keys a batch holds, strings such as "task" included.
    loader = jaxload.make_loader(args.out, global_batch_size=8, delta_timestamps=DELTA_TIMESTAMPS)
    with loader:
        batch = next(loader)
        print(f"\n{loader}")
    for key, value in batch.items():
        print(f"  {key:32s} {value.dtype!s:8s} {value.shape}")
    with jaxload.make_loader(args.out, global_batch_size=8, keys=["index", "task"]) as loader:
        batch = next(loader)
    tasks = sorted(set(batch["task"].tolist()))
    print(f"\nkeys=['index', 'task']: index {batch['index'].tolist()}, tasks {tasks}")


if __name__ == "__main__":
    main()
