"""Where a contact sheet's panels lie (jaxload.tools.show.layout): one row per sample, one
slot per (camera, window step) at the frames' served aspect ratio, a plot and its strip of
dim cells per vector key, computed before anything is drawn."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jaxload.tools.show import layout as L
from jaxload.tools.show import show
from tests.tools.show.sheets import (
    PRIMARY,
    WRIST,
    camera_window,
    mixture_batch,
    png,
    sample_row,
    series_window,
)


def test_a_sheet_has_one_row_per_sample_and_one_panel_per_camera_slot(tmp_path):
    batch = mixture_batch()
    layout = show(batch, tmp_path / "sheet.png")
    pixels = png(tmp_path / "sheet.png")
    assert pixels.shape[:2] == layout.size[::-1]
    assert len(layout.rows) == 4
    tops = [row.box[1] for row in layout.rows]
    assert tops == sorted(tops) and all(b - a > L.FRAME_HEIGHT for a, b in itertools.pairwise(tops))
    for row in layout.rows:
        assert list(row.cameras) == [PRIMARY, WRIST]
        assert len(row.cameras[PRIMARY]) == 3 and len(row.cameras[WRIST]) == 2
        assert list(row.plots) == ["action", "observation.state"]
        assert len(row.dims["action"]) == 6
        boxes = [*row.cameras[PRIMARY], *row.cameras[WRIST], *row.plots.values()]
        for a, b in itertools.pairwise(boxes):  # left to right, never overlapping
            assert a[2] <= b[0] and a[1] == b[1] and a[3] - a[1] == L.FRAME_HEIGHT
        # frames keep their served aspect ratio: 32x48 shown FRAME_HEIGHT tall
        x0, _, x1, _ = row.cameras[PRIMARY][0]
        assert x1 - x0 == round(L.FRAME_HEIGHT * 48 / 32)
        assert boxes[-1][2] <= layout.size[0] and row.box[3] <= layout.size[1]
    # the frame is drawn in its slot: its middle pixel is the frame's, scaled
    x0, y0, x1, y1 = layout.rows[2].cameras[PRIMARY][1]
    frame = batch[PRIMARY][2, 1]
    want = frame[16, 24]
    got = pixels[(y0 + y1) // 2, (x0 + x1) // 2]
    assert np.abs(got.astype(int) - want.astype(int)).max() < 60


@pytest.mark.parametrize(
    ("shape", "width"),
    [((32, 48, 3), 144), ((96, 96, 3), 96), ((400, 10, 3), L.MIN_SLOT_WIDTH),
     ((10, 400, 3), L.MAX_SLOT_WIDTH)],
)  # fmt: skip
def test_a_slot_keeps_the_frames_aspect_ratio_within_its_bounds(shape, width):
    assert L.slot_width(shape) == width


def test_rows_stack_below_the_header_and_panels_run_left_to_right():
    rows = [
        sample_row(
            [camera_window("a", 2, 32, 64), camera_window("b", 1, 64, 64)],
            [series_window("action", 4, 5)],
        )
    ] * 3
    sheet = L.sheet_layout(rows)
    assert sheet.header == (
        L.MARGIN,
        L.MARGIN,
        sheet.size[0] - L.MARGIN,
        L.MARGIN + L.HEADER_HEIGHT,
    )
    assert sheet.rows[0].box[1] == sheet.header[3]
    for above, below in itertools.pairwise(sheet.rows):
        assert below.box[1] - above.box[3] == L.ROW_GAP
    assert sheet.size[1] == sheet.rows[-1].box[3] + L.MARGIN
    row = sheet.rows[0]
    assert row.info == (L.MARGIN, row.box[1], L.MARGIN + L.INFO_WIDTH, row.box[3])
    a, b = row.cameras["a"], row.cameras["b"]
    assert [x1 - x0 for x0, _, x1, _ in (*a, *b)] == [192, 192, 96]
    assert a[0][0] == L.MARGIN + L.INFO_WIDTH + L.GROUP_GAP
    assert a[1][0] - a[0][2] == L.SLOT_GAP and b[0][0] - a[1][2] == L.GROUP_GAP  # slots, groups
    plot = row.plots["action"]
    assert plot[0] - b[0][2] == L.GROUP_GAP and plot[2] - plot[0] == L.PLOT_WIDTH
    assert row.box[2] == plot[2] and sheet.size[0] == plot[2] + L.MARGIN


@pytest.mark.parametrize("dims", [1, 5, 7, 300])
def test_a_plots_dim_cells_split_its_width_in_order_each_at_least_a_pixel(dims):
    (row,) = L.sheet_layout([sample_row(series=[series_window("action", 4, dims)])]).rows
    x0, _, x1, y1 = row.plots["action"]
    cells = row.dims["action"]
    assert len(cells) == dims
    assert cells[0][0] == x0 and cells[-1][2] <= x1
    for cell in cells:
        assert cell[2] - cell[0] >= 1 and cell[1] == y1 + 2
        assert cell[3] - cell[1] == L.DIM_STRIP_HEIGHT - 2
    for a, b in itertools.pairwise(cells):
        assert a[0] <= b[0] and a[2] <= b[2]  # left to right (more dims than pixels share)
    if dims <= L.PLOT_WIDTH // 2:  # room for a gap: cells keep one pixel apart
        assert all(a[2] < b[0] for a, b in itertools.pairwise(cells))


def test_a_sheet_without_panels_is_still_two_plots_wide():
    sheet = L.sheet_layout([sample_row()])
    assert sheet.size[0] == 2 * L.MARGIN + L.INFO_WIDTH + 2 * L.PLOT_WIDTH
    assert sheet.rows[0].cameras == {} and sheet.rows[0].plots == {}
