"""Where a contact sheet's panels lie (jaxload.tools.show.layout): one row per sample, one
slot per (camera, window step) at the frames' served aspect ratio, a plot and its strip of
dim cells per vector key, computed before anything is drawn."""

from __future__ import annotations

import itertools

import numpy as np

from jaxload.tools.show import layout as L
from jaxload.tools.show import show
from tests.tools.show.sheets import PRIMARY, WRIST, mixture_batch, png


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
