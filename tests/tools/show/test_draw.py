"""The contact sheet's drawing (jaxload.tools.show.draw): every mark at the place the layout
gives (padded slots, missing cameras, padded steps and dims), bars for one-step vectors,
each dimension on its own scale where one axis would flatten them, and Pillow's absence
said with what to install."""

from __future__ import annotations

import sys

import pytest

from jaxload.tools.show import draw, show
from tests.tools.show.sheets import PRIMARY, WRIST, check_marks, edge, mixture_batch, png


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
