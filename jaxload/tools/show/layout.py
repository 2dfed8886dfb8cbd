"""Where everything of a contact sheet lies, in pixels, computed before anything is drawn
(so tests can look at known places): a header (column titles, legend), then one row per
sample: an info column, one panel per (camera, window slot), one line plot per vector key
with its strip of dims below it.

Boxes are `(x0, y0, x1, y1)`, x1 and y1 exclusive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxload.tools.show.rows import SampleRow

Box = tuple[int, int, int, int]

MARGIN = 12
INFO_WIDTH = 250
FRAME_HEIGHT = 96  # every camera's frames are shown this tall, at their served aspect ratio
MIN_SLOT_WIDTH, MAX_SLOT_WIDTH = 40, 200
SLOT_GAP = 4
GROUP_GAP = 14
PLOT_WIDTH = 250
DIM_STRIP_HEIGHT = 8
CAPTION_HEIGHT = 52  # below a row's panels: slot offsets, a plot's scale note
TITLE_HEIGHT = 20  # above a row's panels: camera names, plot titles
HEADER_HEIGHT = 56  # the sheet's title and legend
ROW_GAP = 10


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """One sample's row: its whole box, its info column, `cameras[key]` one box per window
    slot, `plots[key]` a plot's box and `dims[key]` its strip of per-dim cells."""

    box: Box
    info: Box
    cameras: dict[str, tuple[Box, ...]]
    plots: dict[str, Box]
    dims: dict[str, tuple[Box, ...]]


@dataclasses.dataclass(frozen=True)
class SheetLayout:
    """The sheet's size `(width, height)`, its header box and one `RowLayout` per sample."""

    size: tuple[int, int]
    header: Box
    rows: tuple[RowLayout, ...]


def slot_width(frame_shape: Sequence[int]) -> int:
    """A slot's width for frames of shape (H, W, C) shown FRAME_HEIGHT tall."""
    height, width = frame_shape[0], frame_shape[1]
    return max(MIN_SLOT_WIDTH, min(MAX_SLOT_WIDTH, round(FRAME_HEIGHT * width / height)))


def sheet_layout(rows: Sequence[SampleRow]) -> SheetLayout:
    """The layout of `rows` (all rows of a batch share keys, window lengths and sizes)."""
    first = rows[0]
    row_height = TITLE_HEIGHT + FRAME_HEIGHT + DIM_STRIP_HEIGHT + CAPTION_HEIGHT
    x_panels = MARGIN + INFO_WIDTH + GROUP_GAP
    out = []
    for i in range(len(rows)):
        top = MARGIN + HEADER_HEIGHT + i * (row_height + ROW_GAP)
        y0 = top + TITLE_HEIGHT
        x = x_panels
        cameras = {}
        for camera in first.cameras:
            width = slot_width(camera.frames.shape[1:])
            slots = []
            for _ in range(len(camera.frames)):
                slots.append((x, y0, x + width, y0 + FRAME_HEIGHT))
                x += width + SLOT_GAP
            cameras[camera.key] = tuple(slots)
            x += GROUP_GAP - SLOT_GAP
        plots, dims = {}, {}
        for series in first.series:
            plots[series.key] = (x, y0, x + PLOT_WIDTH, y0 + FRAME_HEIGHT)
            dims[series.key] = _dim_cells(x, y0 + FRAME_HEIGHT + 2, len(series.dim_is_pad))
            x += PLOT_WIDTH + GROUP_GAP
        right = x - GROUP_GAP
        info = (MARGIN, top, MARGIN + INFO_WIDTH, top + row_height)
        out.append(RowLayout((MARGIN, top, right, top + row_height), info, cameras, plots, dims))
    width = max(out[0].box[2] + MARGIN, MARGIN * 2 + INFO_WIDTH + 2 * PLOT_WIDTH)
    height = out[-1].box[3] + MARGIN
    return SheetLayout((width, height), (MARGIN, MARGIN, width - MARGIN, MARGIN + HEADER_HEIGHT),
                       tuple(out))  # fmt: skip


def _dim_cells(x: int, y: int, count: int) -> tuple[Box, ...]:
    """`count` cells side by side across a plot's width, DIM_STRIP_HEIGHT - 2 tall."""
    width = PLOT_WIDTH / max(count, 1)
    return tuple(
        (x + round(d * width), y, x + max(round((d + 1) * width) - 1, round(d * width) + 1),
         y + DIM_STRIP_HEIGHT - 2)
        for d in range(count)
    )  # fmt: skip
