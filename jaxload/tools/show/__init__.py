"""`jaxload.show`: one PNG contact sheet of what a loader serves (after windows, camera
mapping, image transforms and mixture assembly), for `jaxload show` and training scripts.

Per sample a row: every camera's frames across its window (padded slots and missing
cameras marked), the vector windows (action, state) as line plots (padded steps and dims
marked; values as served, the dataset's own stats noted), and the dataset, episode, frame,
task and `dataset_index`. Drawn with Pillow (`pip install 'jaxload[show]'`); no display.

    layout = jaxload.show(loader, "sheet.png")      # the loader's next batch; loader unmoved
    layout = jaxload.show(batch, "sheet.png")       # a batch: numpy or global jax.Arrays

Modules: `rows.py` (what a batch's rows hold), `layout.py` (where each panel lies),
`draw.py` (the drawing and its marks).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from jaxload.tools.show.layout import SheetLayout
from jaxload.tools.show.rows import Context, SampleRow, sample_rows

DEFAULT_SAMPLES = 6

__all__ = ["SheetLayout", "collect", "render_sheet", "show"]


def show(
    batch_or_loader: Any,
    path: str | os.PathLike,
    *,
    samples: int | None = None,
    title: str | None = None,
) -> SheetLayout:
    """Writes a PNG contact sheet of a batch, or of a loader's next batch.

    Args:
        batch_or_loader: a batch (dict of numpy arrays or of global `jax.Array`s, as
            `next(loader)` gives; a multi-host batch shows this process's rows), or a
            `jaxload` loader: its next batch is read and the loader put back where it was
            (`get_state`/`set_state`, so training continues with that same batch; worker
            processes restart), and its datasets' names, fps, tasks and stats label rows.
        path: the PNG to write (its folder must exist).
        samples: rows to show (the batch's first ones); default the first 6.
        title: the sheet's title; default the number of rows and where they come from.

    Returns:
        The sheet's `SheetLayout`: its size and each row's panel boxes.

    Example::

        loader = jaxload.make_loader(sources, global_batch_size=32, ...)
        jaxload.show(loader, "sheet.png", samples=6)
    """
    rows, default_title = collect(batch_or_loader, samples)
    return render_sheet(rows, path, default_title if title is None else title)


def collect(batch_or_loader: Any, samples: int | None = None) -> tuple[list[SampleRow], str]:
    """The rows `show` draws (`rows.SampleRow`s) and a title saying where they come from."""
    if isinstance(batch_or_loader, Mapping):
        batch, context = batch_or_loader, Context()
    elif hasattr(batch_or_loader, "get_state") and hasattr(batch_or_loader, "spec"):
        batch, context = _peek(batch_or_loader)
    else:
        raise TypeError(
            f"jaxload.show takes a batch (a dict of arrays) or a jaxload loader, not "
            f"{type(batch_or_loader).__name__}"
        )
    rows = sample_rows(batch, context, DEFAULT_SAMPLES if samples is None else samples)
    where = f" of {len(context.names)} datasets" if len(context.names) > 1 else ""
    first = rows[0].position
    since = f", stream positions from {first}" if first is not None else ""
    return rows, f"jaxload show: {len(rows)} samples as the loader serves them{where}{since}"


def render_sheet(rows: list[SampleRow], path: str | os.PathLike, title: str) -> SheetLayout:
    """Draws `rows` (`rows.SampleRow`s) and writes the PNG atomically; returns the layout."""
    from jaxload.tools.show.draw import render

    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{path}: its folder {folder} does not exist")
    image, layout = render(rows, title)
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        image.save(temporary, format="PNG", optimize=True)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return layout


def _peek(loader: Any) -> tuple[Mapping[str, Any], Context]:
    """The loader's next batch, the loader put back before it, and what labels its rows."""
    spec = loader.spec
    state, first = loader.get_state(), loader.position
    try:
        batch = next(loader)
    except StopIteration:
        raise ValueError(
            f"the loader has no next batch (its {spec.num_epochs} epochs are read): "
            "nothing to show; pass a batch, or a loader before its end"
        ) from None
    finally:
        loader.set_state(state)
    full = len(next(iter(batch.values()))) == spec.global_batch_size if batch else True
    rows = range(spec.global_batch_size) if full else spec.rows
    context = Context(
        names=tuple(spec.names),
        datasets=tuple(loader.datasets),
        positions=tuple(first + int(r) for r in rows),
    )
    return batch, context
