"""jaxload show PATH_OR_SOURCES: a PNG contact sheet of the samples a loader serves.

One row per sample: every camera's frames across its window (padded slots marked, a
camera its dataset lacks shown as missing), the action and state windows as line plots
(padded steps and dims marked), and its dataset, episode, frame, task and dataset_index.

Examples:
    jaxload show out/pusht                              # 6 samples, action 0..15 frames
    jaxload show out/pusht --frames action=0:16 --frames observation.images.top=-2:1
    jaxload show out/a out/b --resize 64x64 --out mix.png    # a mixture, default weights
    jaxload show sources.json --samples 8 --weights frames    # camera maps, weights

A sources file is a JSON list of `jaxload.DatasetSource` fields, one object per dataset
(paths relative to the working directory):

    [{"path": "out/arm", "cameras": {"observation.images.primary": "observation.images.top",
                                      "observation.images.wrist": "observation.images.wrist"}},
     {"path": "out/mobile",
      "cameras": {"observation.images.primary": "observation.images.front",
                  "observation.images.wrist": null}}]

(`weight` in every entry or none; with `--weights frames` each one multiplies its size's.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from jaxload.errors import JaxloadError
from jaxload.tools.dataset_path import add_storage_option

NAME = "show"
HELP = "a PNG contact sheet of the samples a loader serves (cameras, windows, pads, tasks)"
DEFAULT_SAMPLES = 6
DEFAULT_WINDOWS = {"action": range(16)}  # when no --frames: the action chunk, where present
SOURCE_FIELDS = ("path", "weight", "episodes", "delta_timestamps", "delta_frames", "key_map",
                 "cameras")  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sources",
        nargs="+",
        metavar="PATH_OR_SOURCES",
        help="jaxload datasets (several: a mixture), or one .json file listing "
        "DatasetSource fields per dataset (path, weight, episodes, cameras, key_map, "
        "delta_frames, delta_timestamps)",
    )
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                        help=f"rows of the sheet (default {DEFAULT_SAMPLES})")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="the loader's seed (default 0)")
    parser.add_argument("--out", default="sheet.png", help="the PNG (default sheet.png)")
    parser.add_argument(
        "--frames",
        action="append",
        default=[],
        type=window,
        metavar="KEY=START:STOP",
        help="a window in frames at each dataset's own fps (delta_frames), repeatable: "
        "action=0:16, observation.images.top=-2:1 or a list -4,-2,0; default action=0:16 "
        "where the datasets have an action",
    )
    parser.add_argument(
        "--resize", type=size, metavar="HxW", help="image_transforms=[Resize((H, W))]"
    )
    parser.add_argument(
        "--weights",
        choices=("frames", "anchors", "episodes", "uniform"),
        help="a mixture's weights by the datasets' sizes (jaxload.MixtureWeights(by=...)), "
        "times each source's weight; default: the sources' weights, else their anchors",
    )
    add_storage_option(parser, "datasets at URLs")


def window(text: str) -> tuple[str, list[int]]:
    """KEY=START:STOP (a range) or KEY=A,B,C (a list) as (key, frame offsets)."""
    key, sep, spec = text.rpartition("=")
    try:
        if not sep or not key:
            raise ValueError
        if ":" in spec:
            start, stop = (int(part) for part in spec.split(":"))
            offsets = list(range(start, stop))
        else:
            offsets = [int(part) for part in spec.split(",")]
    except ValueError:
        offsets = []
    if not offsets:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected KEY=START:STOP (frames START..STOP-1) or KEY=A,B,C"
        )
    return key, offsets


def size(text: str) -> tuple[int, int]:
    height, sep, width = text.lower().partition("x")
    if not sep or not height.isdigit() or not width.isdigit() or min(int(height), int(width)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HEIGHTxWIDTH, e.g. 224x224")
    return int(height), int(width)


def run(args: argparse.Namespace) -> int:
    from jaxload.tools.dataset_path import storage_options_of

    if args.samples < 1:
        raise JaxloadError(f"--samples {args.samples}: give at least 1")
    loader = make_loader(
        sources_of(args.sources),
        samples=args.samples,
        seed=args.seed,
        windows=dict(args.frames) or None,
        resize=args.resize,
        weights=args.weights,
        storage_options=storage_options_of(args),
    )
    return write_sheet(loader, args.out, args.samples)


def sources_of(items: list[str]) -> list[Any]:
    """Paths as they are, or one .json file's entries as `jaxload.DatasetSource`s."""
    import jaxload

    if not (len(items) == 1 and items[0].endswith(".json")):
        return list(items)
    path = Path(items[0])
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise JaxloadError(f"{path}: cannot read the sources file: {e}") from e
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise JaxloadError(f"{path}: expected a JSON list of objects, one per dataset")
    sources = []
    for number, entry in enumerate(entries):
        unknown = set(entry) - set(SOURCE_FIELDS)
        if unknown or "path" not in entry:
            problem = f"unknown fields {sorted(unknown)}" if unknown else "no 'path'"
            raise JaxloadError(
                f"{path}: entry {number}: {problem}; fields are {', '.join(SOURCE_FIELDS)}"
            )
        sources.append(jaxload.DatasetSource(**entry))
    return sources


def make_loader(
    sources: list[Any],
    *,
    samples: int,
    seed: int,
    windows: dict[str, list[int]] | None,
    resize: tuple[int, int] | None,
    weights: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """One global batch of `samples` rows, this process reading all of them."""
    import jaxload
    from jaxload.transforms import Resize

    def build(frames: Any) -> Any:
        return jaxload.make_loader(
            sources,
            global_batch_size=samples,
            seed=seed,
            delta_frames=frames,
            image_transforms=[Resize(resize)] if resize else None,
            weights=jaxload.MixtureWeights(by=weights) if weights else None,
            options=jaxload.PipelineOptions(num_workers=0),
            host_index=0,
            host_count=1,
            storage_options=storage_options,
        )

    try:  # the arguments are the user's: a ValueError is their mistake, said as it is
        loader = build(windows)
        if windows is None and any("action" in ds.features for ds in loader.datasets):
            loader = build(DEFAULT_WINDOWS)
    except ValueError as e:
        hint = ""
        if weights is None and any(getattr(s, "weight", None) is not None for s in sources):
            hint = (
                "; with --weights frames|anchors|episodes|uniform the sources' weights are "
                "multipliers of that rule, and a source without one counts 1"
            )
        raise JaxloadError(f"{e}{hint}") from e
    return loader


def write_sheet(loader: Any, out: str, samples: int) -> int:
    """Renders the loader's next batch to `out`; prints what each row shows."""
    from jaxload.tools.show import collect, render_sheet

    rows, title = collect(loader, samples)
    sheet = render_sheet(rows, out, title)
    print(f"wrote {out}: {len(rows)} samples, {sheet.size[0]}x{sheet.size[1]} px")
    for number, row in enumerate(rows):
        print(f"  row {number}: {describe(row)}")
    return 0


def describe(row: Any) -> str:
    """One line for a row: who it is and what is padded or missing."""
    import numpy as np

    name = Path(row.dataset).name if row.dataset else f"dataset {row.dataset_index}"
    parts = [f"{name} (dataset_index {row.dataset_index}) episode {row.episode} frame {row.frame}"]
    for camera in row.cameras:
        if camera.missing:
            parts.append(f"{camera.key} missing")
        elif camera.is_pad.any():
            slots = ", ".join(str(int(t)) for t in np.flatnonzero(camera.is_pad))
            parts.append(f"{camera.key} slots {slots} padded")
    for series in row.series:
        if series.step_is_pad.any():
            steps = np.flatnonzero(series.step_is_pad)
            parts.append(f"{series.key} steps {steps[0]}..{steps[-1]} padded")
        if series.dim_is_pad.any():
            dims = np.flatnonzero(series.dim_is_pad)
            parts.append(f"{series.key} dims {dims[0]}..{dims[-1]} padded")
    return "; ".join(parts)
