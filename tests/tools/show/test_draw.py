"""The contact sheet's drawing (jaxload.tools.show.draw): every mark at the place the layout
gives (padded slots, missing cameras, padded steps and dims), bars for one-step vectors,
each dimension on its own scale where one axis would flatten them, and Pillow's absence
said with what to install."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from jaxload.tools.show import draw, show
from jaxload.tools.show.rows import CameraWindow, SeriesWindow
from tests.tools.show.sheets import (
    PRIMARY,
    WRIST,
    at,
    check_marks,
    edge,
    mixture_batch,
    png,
    sample_row,
)


def test_padded_slots_missing_cameras_padded_steps_and_dims_are_marked(tmp_path):
    batch = mixture_batch()
    layout = show(batch, tmp_path / "sheet.png")
    pixels = png(tmp_path / "sheet.png")
    ids = check_marks(pixels, layout, batch)
    # the cases the batch holds, each seen at least once
    assert batch[f"{PRIMARY}_is_pad"][0, 0] and batch["action_is_pad"][1].any()
    assert ids[1] == 1 and edge(pixels, layout.rows[1].cameras[WRIST][0]) == draw.MISSING_FILL
    assert edge(pixels, layout.rows[0].cameras[WRIST][0]) != draw.MISSING_FILL
    assert edge(pixels, layout.rows[0].cameras[PRIMARY][0]) == draw.PAD_COLOR
    assert edge(pixels, layout.rows[0].cameras[PRIMARY][1]) != draw.PAD_COLOR


def test_without_pillow_the_error_says_what_to_install(monkeypatch, tmp_path):
    for name in ("PIL", "PIL.Image", "PIL.ImageDraw", "PIL.ImageFont"):
        monkeypatch.setitem(sys.modules, name, None)  # what `import PIL` meets uninstalled
    with pytest.raises(ImportError, match=r"pip install 'jaxload\[show\]'"):
        show(mixture_batch(), tmp_path / "sheet.png")
    assert list(tmp_path.iterdir()) == []


def _pixels(rows):
    image, layout = draw.render(rows, "title")
    return np.asarray(image), layout


def _series(values, dim_is_pad=None, step_is_pad=None) -> SeriesWindow:
    values = np.asarray(values, np.float64)
    steps, dims = values.shape
    dim_is_pad = np.zeros(dims, bool) if dim_is_pad is None else np.asarray(dim_is_pad)
    step_is_pad = np.zeros(steps, bool) if step_is_pad is None else np.asarray(step_is_pad)
    return SeriesWindow("observation.state", values, step_is_pad, dim_is_pad, "")


def test_a_one_step_vector_is_bars_from_zero_and_its_padded_dim_has_none():
    # dim 3 padded (non-zero here, to see that it is left out, not merely flat)
    series = _series([[1.0, -1.0, 0.5, 0.75]], dim_is_pad=[False, False, False, True])
    pixels, layout = _pixels([sample_row(series=[series])])
    x0, y0, x1, y1 = layout.rows[0].plots["observation.state"]
    inner = (x0 + 1, y0 + 14, x1 - 2, y1 - 6)
    width = (inner[2] - inner[0]) / 4
    zero = (inner[1] + inner[3]) // 2  # values -1 .. 1: zero halfway

    def colour(d, dy):
        return at(pixels, round(inner[0] + (d + 0.5) * width), zero + dy)

    assert colour(0, -10) == draw.LINES[0] and colour(0, 10) == draw.BACKGROUND  # up from zero
    assert colour(1, 10) == draw.LINES[1] and colour(1, -10) == draw.BACKGROUND  # down
    assert colour(2, -10) == draw.LINES[2] and colour(2, -35) == draw.BACKGROUND  # half as tall
    assert colour(3, -10) == colour(3, 10) == draw.BACKGROUND  # padded: not drawn
    cells = layout.rows[0].dims["observation.state"]
    centres = [at(pixels, (c[0] + c[2]) // 2, (c[1] + c[3]) // 2) for c in cells]
    assert centres == [*draw.LINES[:3], draw.PAD_COLOR]


def test_dims_far_apart_are_each_drawn_on_their_own_scale():
    ramp = np.linspace(0.0, 1.0, 8)
    apart = np.stack([ramp, 1001 - ramp], axis=1)  # up, and down far above it
    low, high = draw.separate_scales(apart)
    assert low.tolist() == [0.0, 1000.0] and high.tolist() == [1.0, 1001.0]
    assert draw.separate_scales(apart[: draw.SEPARATE_MIN_STEPS - 1]) == (None, None)
    assert draw.separate_scales(apart[:, :1]) == (None, None)  # one dim: one axis
    assert draw.separate_scales(np.stack([ramp, 2 * ramp], axis=1)) == (None, None)
    pixels, layout = _pixels([sample_row(series=[_series(apart)])])
    x0, y0, x1, y1 = layout.rows[0].plots["observation.state"]
    plot = pixels[y0:y1, x0:x1]
    for d in (0, 1):  # each spans the plot's height: neither is a flat line at one end
        rows = np.flatnonzero(np.all(plot == draw.LINES[d], axis=-1).any(axis=1))
        assert rows.max() - rows.min() > 0.6 * (y1 - y0), d


def test_a_padded_slot_is_its_frame_faded_towards_white():
    frames = np.full((2, 96, 96, 3), 100, np.uint8)
    camera = CameraWindow(PRIMARY, frames, np.array([True, False]), False)
    pixels, layout = _pixels([sample_row(cameras=[camera])])
    padded, real = layout.rows[0].cameras[PRIMARY]
    # a pixel off the hatching (lines where dx - dy = 4 mod 10) and clear of border and label
    dx, dy = 59, 50
    assert (dx - dy) % 10 == 9
    assert at(pixels, real[0] + dx, real[1] + dy) == (100, 100, 100)
    faded = at(pixels, padded[0] + dx, padded[1] + dy)
    assert all(abs(v - (0.55 * 100 + 0.45 * 255)) <= 1 for v in faded), faded
    assert edge(pixels, padded) == draw.PAD_COLOR and edge(pixels, real) != draw.PAD_COLOR


def test_each_dataset_has_its_stripe_colour():
    rows = [sample_row(dataset_index=i) for i in (0, 1, 8)]
    pixels, layout = _pixels(rows)
    for row, box in zip(rows, layout.rows):
        x0, y0, _, y1 = box.info
        assert at(pixels, x0 + 2, (y0 + y1) // 2) == draw.dataset_colour(row.dataset_index)
    assert draw.dataset_colour(8) == draw.dataset_colour(0) != draw.dataset_colour(1)


def test_a_long_name_is_cut_at_its_front_to_fit():
    pil = draw.pillow()
    pen = draw._Pen(pil, pil.Image.new("RGB", (10, 10)))
    name = "/data/" + "nested/" * 30 + "my_dataset"
    cut = draw._fit(pen, name, 120, pen.font)
    assert cut.startswith("…") and cut.endswith("my_dataset") and pen.width(cut) <= 120
    assert draw._fit(pen, "short", 120, pen.font) == "short"


def test_ranges_and_slot_offsets_in_words():
    assert draw._ranges(np.array([3, 4, 5, 9])) == "3-5, 9"
    assert draw._ranges(np.array([0])) == "0"
    assert draw._ranges(np.array([1, 2, 4, 5, 7])) == "1-2, 4-5, 7"
    assert [draw._offset(t) for t in (-4, 0, 2)] == ["t-4", "t", "t+2"]
