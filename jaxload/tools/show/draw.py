"""A contact sheet drawn with Pillow, at the places `layout.sheet_layout` computed.

The marks (constants here, so tests look for their pixels):

* a padded window slot: its frame faded, a PAD_COLOR border and hatching, "PAD";
* a camera missing from the sample's dataset: every slot MISSING_FILL with a cross and
  "missing";
* a plot's padded steps: PAD_SHADE behind them, "pad" above, "padded: steps 9-15" below;
  its padded dims: cells of the strip below it in PAD_COLOR (real dims in their line's
  colour), and not drawn as lines.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

import numpy as np

from jaxload.tools.show import layout as L
from jaxload.tools.show.rows import CameraWindow, SampleRow, SeriesWindow

BACKGROUND = (255, 255, 255)
TEXT = (20, 20, 20)
MUTED = (110, 110, 110)
FRAME_BORDER = (170, 170, 170)
PAD_COLOR = (228, 26, 28)
PAD_SHADE = (255, 214, 214)
MISSING_FILL = (64, 64, 64)
MISSING_MARK = (200, 200, 200)
# Line colours per dim, and one colour per dataset (the stripe left of its rows).
LINES = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (148, 103, 189), (140, 86, 75),
         (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (57, 59, 121),
         (99, 121, 57), (140, 109, 49), (132, 60, 57), (123, 65, 115)]  # fmt: skip
DATASETS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (148, 103, 189), (140, 86, 75),
            (227, 119, 194), (188, 189, 34), (23, 190, 207)]  # fmt: skip
SEPARATE_SCALES = 10.0
SEPARATE_MIN_STEPS = 4  # 2 or 3 steps on their own scales would all look alike (/ or \)
PILLOW = "jaxload show draws with Pillow, which is not installed: pip install 'jaxload[show]'"


def pillow() -> Any:
    """The PIL package, or a clear error saying what to install."""
    try:
        import PIL.Image
        import PIL.ImageDraw
        import PIL.ImageFont
    except ImportError as e:
        raise ImportError(PILLOW) from e
    return PIL


def dataset_colour(index: int) -> tuple[int, int, int]:
    return DATASETS[index % len(DATASETS)]


def render(rows: Sequence[SampleRow], title: str) -> tuple[Any, L.SheetLayout]:
    """The sheet of `rows` as a PIL image, and its layout."""
    pil = pillow()
    sheet = L.sheet_layout(rows)
    image = pil.Image.new("RGB", sheet.size, BACKGROUND)
    pen = _Pen(pil, image)
    _header(pen, sheet, rows[0], title)
    for row, box in zip(rows, sheet.rows):
        _row(pen, row, box)
    return image, sheet


class _Pen:
    """An ImageDraw with the sheet's fonts."""

    def __init__(self, pil: Any, image: Any):
        self.pil, self.image = pil, image
        self.draw = pil.ImageDraw.Draw(image)
        self.font = pil.ImageFont.load_default(size=13)
        self.small = pil.ImageFont.load_default(size=12)
        self.big = pil.ImageFont.load_default(size=15)

    def text(self, xy: tuple[int, int], text: str, fill=TEXT, font: Any = None) -> None:
        self.draw.text(xy, text, fill=fill, font=font or self.font)

    def width(self, text: str, font: Any = None) -> int:
        return int(self.draw.textlength(text, font=font or self.font))


def _header(pen: _Pen, sheet: L.SheetLayout, first: SampleRow, title: str) -> None:
    x0, y0, _, _ = sheet.header
    pen.text((x0, y0), title, font=pen.big)
    y = y0 + 24
    x = x0
    # The legend: one sample of each mark, then its meaning.
    box = (x, y, x + 26, y + 18)
    pen.draw.rectangle(box, fill=(235, 235, 235))
    _pad_marks(pen, box, label=False)
    x = _legend_text(pen, x + 32, y, "padded slot (a copy of the episode's edge frame)")
    box = (x, y, x + 26, y + 18)
    _missing_marks(pen, box, label=False)
    x = _legend_text(pen, x + 32, y, "camera missing in that dataset (zeros)")
    pen.draw.rectangle((x, y, x + 26, y + 18), fill=PAD_SHADE)
    x = _legend_text(pen, x + 32, y, "padded steps")
    pen.draw.rectangle((x, y + 5, x + 12, y + 12), fill=PAD_COLOR)
    _legend_text(pen, x + 18, y, "padded dims (zeros, not plotted)")


def _legend_text(pen: _Pen, x: int, y: int, text: str) -> int:
    pen.text((x, y + 2), text, fill=MUTED)
    return x + pen.width(text) + 18


def _row(pen: _Pen, row: SampleRow, box: L.RowLayout) -> None:
    x0, y0, x1, y1 = box.info
    colour = dataset_colour(row.dataset_index)
    pen.draw.rectangle((x0, y0, x0 + 5, y1 - 1), fill=colour)
    pen.draw.line((x0, y1 + L.ROW_GAP // 2, box.box[2], y1 + L.ROW_GAP // 2), fill=(225,) * 3)
    _info(pen, row, (x0 + 12, y0, x1, y1), colour)
    for camera in row.cameras:
        _camera(pen, camera, box.cameras[camera.key])
    for series in row.series:
        _plot(pen, series, box.plots[series.key], box.dims[series.key])


def _info(pen: _Pen, row: SampleRow, box: L.Box, colour: tuple[int, int, int]) -> None:
    x, y, x1, _ = box
    name = PurePath(row.dataset).name if row.dataset else f"dataset {row.dataset_index}"
    pen.text((x, y), _fit(pen, name, x1 - x, pen.big), fill=colour, font=pen.big)
    fps = f", {row.fps:g} fps" if row.fps else ""
    lines = [f"dataset_index {row.dataset_index}{fps}"]
    where = [f"episode {row.episode}" if row.episode is not None else ""]
    where.append(f"frame {row.frame}" if row.frame is not None else "")
    lines.append(", ".join(w for w in where if w))
    if row.position is not None:
        lines.append(f"position {row.position} of the stream")
    task = row.task or "(no task in the batch)"
    lines += textwrap.wrap(f"task: {task}", width=34)[:3]
    for i, line in enumerate(line for line in lines if line):
        pen.text((x, y + 20 + 16 * i), line)


def _fit(pen: _Pen, text: str, width: int, font: Any) -> str:
    """`text`, cut with "…" at the front (a path's tail says most) to fit `width`."""
    if pen.width(text, font) <= width:
        return text
    while text and pen.width("…" + text, font) > width:
        text = text[1:]
    return "…" + text


def _camera(pen: _Pen, camera: CameraWindow, slots: Sequence[L.Box]) -> None:
    x0, y0 = slots[0][0], slots[0][1]
    height, width = camera.frames.shape[1:3]
    name = camera.key.removeprefix("observation.images.")
    title = f"{name} {height}x{width}" + (f", {len(slots)} slots" if len(slots) > 1 else "")
    pen.text((x0, y0 - L.TITLE_HEIGHT + 3), _fit(pen, title, slots[-1][2] - x0, pen.font))
    for t, box in enumerate(slots):
        if camera.missing:
            _missing_marks(pen, box, label=True)
            continue
        frame = camera.frames[t]
        if frame.shape[-1] == 1:
            frame = np.repeat(frame, 3, axis=-1)
        picture = pen.pil.Image.fromarray(np.ascontiguousarray(frame[..., :3]))
        size = (box[2] - box[0], box[3] - box[1])
        shrinking = size[0] < picture.width
        resample = pen.pil.Image.BILINEAR if shrinking else pen.pil.Image.NEAREST
        picture = picture.resize(size, resample)
        if camera.is_pad[t]:
            white = pen.pil.Image.new("RGB", size, BACKGROUND)
            picture = pen.pil.Image.blend(picture, white, 0.45)
        pen.image.paste(picture, box[:2])
        if camera.is_pad[t]:
            _pad_marks(pen, box, label=True)
        else:
            pen.draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), outline=FRAME_BORDER)
        if len(slots) > 1:
            label = f"[{t}]" if camera.offsets is None else _offset(camera.offsets[t])
            pen.text((box[0] + 2, box[3] + L.DIM_STRIP_HEIGHT), label, MUTED, pen.small)


def _offset(frames: int) -> str:
    """A slot's offset from the sample's frame: "t", "t-4", "t+2" (in frames)."""
    return "t" if frames == 0 else f"t{frames:+d}"


def _pad_marks(pen: _Pen, box: L.Box, label: bool) -> None:
    x0, y0, x1, y1 = box
    for k in range(-(y1 - y0), x1 - x0, 10):  # hatching, clipped to the box
        a = (x0 + max(k, 0), y0 + max(-k, 0))
        run = min(x1 - x0 - max(k, 0), y1 - y0 - max(-k, 0)) - 1
        pen.draw.line((a, (a[0] + run, a[1] + run)), fill=PAD_COLOR, width=1)
    pen.draw.rectangle((x0, y0, x1 - 1, y1 - 1), outline=PAD_COLOR, width=3)
    if label:
        pen.draw.rectangle((x0 + 3, y0 + 3, x0 + 33, y0 + 18), fill=PAD_COLOR)
        pen.text((x0 + 5, y0 + 4), "PAD", fill=BACKGROUND, font=pen.small)


def _missing_marks(pen: _Pen, box: L.Box, label: bool) -> None:
    x0, y0, x1, y1 = box
    pen.draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=MISSING_FILL)
    pen.draw.line((x0, y0, x1 - 1, y1 - 1), fill=MISSING_MARK, width=2)
    pen.draw.line((x0, y1 - 1, x1 - 1, y0), fill=MISSING_MARK, width=2)
    if label:
        text = "missing"
        w = pen.width(text, pen.small)
        cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
        pen.draw.rectangle((cx - w // 2 - 3, cy - 8, cx + w // 2 + 3, cy + 8), fill=MISSING_FILL)
        pen.text((cx - w // 2, cy - 7), text, fill=BACKGROUND, font=pen.small)


def _plot(pen: _Pen, series: SeriesWindow, box: L.Box, dims: Sequence[L.Box]) -> None:
    x0, y0, x1, y1 = box
    steps, count = series.values.shape
    real = ~series.dim_is_pad
    shape = f"{steps} steps x {int(real.sum())} dims" if steps > 1 else f"{int(real.sum())} dims"
    title = f"{series.key}: {shape}"
    pen.text((x0, y0 - L.TITLE_HEIGHT + 3), _fit(pen, title, x1 - x0, pen.font))
    pen.draw.rectangle((x0, y0, x1 - 1, y1 - 1), outline=FRAME_BORDER)
    inner = (x0 + 1, y0 + 14, x1 - 2, y1 - 6)
    step_width = (inner[2] - inner[0]) / steps

    def x_of(t: float) -> float:
        return inner[0] + (t + 0.5) * step_width

    for t in np.flatnonzero(series.step_is_pad):
        pen.draw.rectangle(
            (round(inner[0] + t * step_width), y0 + 1, round(inner[0] + (t + 1) * step_width) - 1,
             y1 - 2), fill=PAD_SHADE)  # fmt: skip
    if series.step_is_pad.any():
        first = int(np.flatnonzero(series.step_is_pad)[0])
        left = min(round(x_of(first) - step_width / 2) + 2, x1 - pen.width("pad", pen.small) - 3)
        pen.text((left, y0 + 1), "pad", PAD_COLOR, pen.small)
    shown = series.values[:, real] if real.any() else np.zeros((steps, 0))
    lo, hi = (float(shown.min()), float(shown.max())) if shown.size else (0.0, 0.0)
    if steps == 1:  # no window: one bar per dim
        _bars(pen, series, inner, min(lo, 0.0), max(hi, 0.0))
        low = None
    else:
        low, high = separate_scales(shown)
    height = inner[3] - inner[1]

    for column, d in enumerate(np.flatnonzero(real) if steps > 1 else ()):
        colour = LINES[d % len(LINES)]
        a, span = (low[column], high[column] - low[column]) if low is not None else (lo, hi - lo)
        span = span or 1.0
        points = [
            (x_of(t), inner[3] - (v - a) / span * height) for t, v in enumerate(series.values[:, d])
        ]
        pen.draw.line(points, fill=colour, width=2)
    if low is None:  # one axis: its ends (lines: at the left, padded steps are at the right)
        top, bottom = (max(hi, 0.0), min(lo, 0.0)) if steps == 1 else (hi, lo)
        for text, y in ((f"{top:.3g}", y0 + 1), (f"{bottom:.3g}", y1 - 14)):
            x = x1 - pen.width(text, pen.small) - 3 if steps == 1 else x0 + 3
            pen.text((x, y), text, MUTED, pen.small)
    for d, cell in enumerate(dims):
        fill = PAD_COLOR if series.dim_is_pad[d] else LINES[d % len(LINES)]
        pen.draw.rectangle((cell[0], cell[1], cell[2] - 1, cell[3] - 1), fill=fill)
    served = f"served {lo:.3g} .. {hi:.3g}" + (", each dim scaled" if low is not None else "")
    _plot_caption(pen, series, box, count, served)


def _bars(pen: _Pen, series: SeriesWindow, inner: L.Box, lo: float, hi: float) -> None:
    """A window of one step: a bar per dim, from zero, on one axis (padded dims empty)."""
    x0, y0, x1, y1 = inner
    count = series.values.shape[1]
    width = (x1 - x0) / count
    span = hi - lo or 1.0

    def y_of(v: float) -> int:
        return round(y1 - (v - lo) / span * (y1 - y0))

    for d in np.flatnonzero(~series.dim_is_pad):
        a, b = sorted((y_of(0.0), y_of(float(series.values[0, d]))))
        left = round(x0 + d * width + width * 0.15)
        right = max(round(x0 + (d + 1) * width - width * 0.15), left + 1)
        pen.draw.rectangle((left, a, right, max(b, a + 1)), fill=LINES[d % len(LINES)])


def separate_scales(values: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per-dim (min, max) where one shared axis would flatten most dims (the whole range >
    SEPARATE_SCALES x the median dim's own range: offsets or sizes far apart), else
    (None, None)."""
    if values.shape[1] < 2 or len(values) < SEPARATE_MIN_STEPS:
        return None, None
    low, high = values.min(0), values.max(0)
    shared = float(high.max() - low.min())
    if shared <= SEPARATE_SCALES * float(np.median(high - low)):
        return None, None
    return low, high


def _plot_caption(pen: _Pen, series: SeriesWindow, box: L.Box, count: int, served: str) -> None:
    x0, _, x1, y1 = box
    padded = np.flatnonzero(series.dim_is_pad)
    steps = np.flatnonzero(series.step_is_pad)
    parts = []
    if len(steps):
        parts.append(f"steps {_ranges(steps)}")
    if len(padded):
        parts.append(f"dims {_ranges(padded)} of {count}")
    y = y1 + L.DIM_STRIP_HEIGHT
    if parts:
        text = "padded: " + ", ".join(parts)
        pen.text((x0, y), _fit(pen, text, x1 - x0, pen.small), PAD_COLOR, pen.small)
        y += 14
    for line in (served, series.scale or "(no stats for it in its dataset)"):
        pen.text((x0, y), _fit(pen, line, x1 - x0, pen.small), MUTED, pen.small)
        y += 14


def _ranges(indices: np.ndarray) -> str:
    """[3, 4, 5, 9] -> "3-5, 9"."""
    out, start = [], int(indices[0])
    for a, b in zip(indices, [*indices[1:], None]):
        if b is None or b != a + 1:
            out.append(f"{start}-{int(a)}" if a != start else f"{start}")
            start = int(b) if b is not None else 0
    return ", ".join(out)
