"""What the show tests share: a mixture's batch laid out as the loader lays it out, the PNG's
pixels, and the check that every mark of a sheet is drawn where the batch says."""

from __future__ import annotations

import numpy as np

from jaxload.tools.show import draw
from jaxload.tools.show.rows import CameraWindow, SampleRow, SeriesWindow

PRIMARY, WRIST = "observation.images.primary", "observation.images.wrist"


def png(path):
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def at(pixels, x, y):
    return tuple(int(v) for v in pixels[y, x])


def edge(pixels, box):
    """A slot's probe pixel, inside its left edge at mid height: PAD_COLOR for a padded
    slot (its border), MISSING_FILL for a missing camera (clear of the cross), else the
    frame's own pixel."""
    return at(pixels, box[0] + 1, (box[1] + box[3]) // 2)


def mixture_batch(rows=4, steps=3, horizon=8):
    """A mixture's batch as the loader lays it out: two datasets (dataset_index 0, 1), the
    second without a wrist camera (zeros, `_is_pad` True on every slot of its windowed rows;
    the integration tests meet the unwindowed `(B,)` mask) and with 4 of 6 action dims."""
    rng = np.random.default_rng(0)
    ids = np.arange(rows) % 2
    primary = rng.integers(30, 255, (rows, steps, 32, 48, 3), dtype=np.uint8)
    wrist = rng.integers(30, 255, (rows, 2, 24, 24, 3), dtype=np.uint8)  # windowed too
    wrist[ids == 1] = 0
    primary_pad = np.zeros((rows, steps), bool)
    primary_pad[0, 0] = True  # an anchor at an episode's first frame: slot 0 clamped
    action_pad = np.zeros((rows, horizon), bool)
    action_pad[1, 5:] = True  # the chunk runs past the episode's end
    action = rng.normal(size=(rows, horizon, 6)).astype(np.float32)
    dim_pad = np.zeros((rows, 6), bool)
    dim_pad[ids == 1, 4:] = True
    action[dim_pad[:, None, :].repeat(horizon, 1)] = 0
    return {
        PRIMARY: primary,
        f"{PRIMARY}_is_pad": primary_pad,
        WRIST: wrist,
        f"{WRIST}_is_pad": np.repeat((ids == 1)[:, None], 2, axis=1),
        "action": action,
        "action_is_pad": action_pad,
        "action_dim_is_pad": dim_pad,
        "observation.state": rng.normal(size=(rows, 6)).astype(np.float32),
        "dataset_index": ids,
        "episode_index": np.arange(rows),
        "frame_index": np.zeros(rows, np.int64),
        "task": np.array([f"task {r}" for r in range(rows)]),
    }


def check_marks(pixels, layout, batch):
    """Every slot's border says whether it is padded; missing cameras, padded steps and
    padded dims are drawn where the batch says."""
    ids = np.asarray(batch["dataset_index"]) if "dataset_index" in batch else None
    for r, row in enumerate(layout.rows):
        for key, slots in row.cameras.items():
            pad = batch.get(f"{key}_is_pad", np.zeros((len(layout.rows), len(slots)), bool))
            pad = np.broadcast_to(np.asarray(pad[r]), (len(slots),))
            missing = bool(pad.all()) and not np.asarray(batch[key][r]).any()
            for t, (x0, y0, x1, y1) in enumerate(slots):
                corner = edge(pixels, (x0, y0, x1, y1))
                if missing:
                    assert corner == draw.MISSING_FILL, (r, key, t)
                elif pad[t]:
                    assert corner == draw.PAD_COLOR, (r, key, t)
                else:
                    assert corner not in (draw.PAD_COLOR, draw.MISSING_FILL), (r, key, t)
        for key, (x0, y0, x1, y1) in row.plots.items():
            steps = np.asarray(batch.get(f"{key}_is_pad", np.zeros((len(layout.rows), 1))))[r]
            shaded = np.all(pixels[y0 + 20 : y1 - 8, x0 + 2 : x1 - 2] == draw.PAD_SHADE, axis=-1)
            if np.asarray(steps).any():
                # the padded steps' share of the plot's width is shaded
                share = shaded.any(axis=0).mean()
                assert abs(share - np.mean(steps)) < 0.08, (r, key, share)
            else:
                assert not shaded.any(), (r, key)
            dim_pad = batch.get(f"{key}_dim_is_pad")
            for d, cell in enumerate(row.dims[key]):
                padded = dim_pad is not None and bool(np.asarray(dim_pad)[r, d])
                colour = at(pixels, (cell[0] + cell[2]) // 2, (cell[1] + cell[3]) // 2)
                assert (colour == draw.PAD_COLOR) == padded, (r, key, d)
    return ids


def sample_row(cameras=(), series=(), dataset_index=0) -> SampleRow:
    """A sheet row of these panels, nobody's sample."""
    return SampleRow(cameras=tuple(cameras), series=tuple(series), dataset_index=dataset_index,
                     dataset="", episode=None, frame=None, task="", fps=None,
                     position=None)  # fmt: skip


def camera_window(key: str, slots: int, height: int, width: int) -> CameraWindow:
    """A camera's window of black frames, none padded."""
    frames = np.zeros((slots, height, width, 3), np.uint8)
    return CameraWindow(key, frames, np.zeros(slots, bool), False)


def series_window(key: str, steps: int, dims: int) -> SeriesWindow:
    """A vector window of zeros, none padded."""
    return SeriesWindow(key, np.zeros((steps, dims)), np.zeros(steps, bool),
                        np.zeros(dims, bool), "")  # fmt: skip
