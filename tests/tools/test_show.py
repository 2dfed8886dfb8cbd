"""`jaxload show` / `jaxload.show` (issue 45): a contact sheet of what a loader serves.

The sheet's layout is computed before drawing (`SheetLayout`), so these tests read pixels
at known places: one row per sample, one panel per (camera, window slot), padded slots
bordered in PAD_COLOR, a missing camera's slots MISSING_FILL, a plot's padded steps shaded
PAD_SHADE and its padded dims' cells PAD_COLOR. The fast tests draw batches laid out as the
loader lays them out (the arrays of `next(loader)`, built here); the integration tests draw
real loaders over converted datasets: one dataset with padded windows, and a mixture whose
second dataset has no wrist camera, through the API and the command line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import jaxload
from jaxload.cli import main
from jaxload.tools.show import collect, draw, show
from jaxload.tools.show import layout as L
from tests.tools.show.sheets import PRIMARY, WRIST, at, check_marks, edge, mixture_batch, png

# Short episodes on purpose (windows that pad); make_loader warns about that.
pytestmark = pytest.mark.filterwarnings("ignore:.*window's slots fall outside their episode")


def test_samples_picks_the_first_rows_and_the_text_says_who_they_are(tmp_path):
    rows, title = collect(mixture_batch(rows=6), samples=2)
    assert len(rows) == 2 and "2 samples" in title
    assert [r.task for r in rows] == ["task 0", "task 1"]
    assert [r.dataset_index for r in rows] == [0, 1] and rows[1].cameras[1].missing
    layout = show(mixture_batch(rows=6), tmp_path / "s.png", samples=2)
    assert len(layout.rows) == 2 and png(tmp_path / "s.png").shape[0] == layout.size[1]
    with pytest.raises(ValueError, match="samples must be at least 1"):
        show(mixture_batch(), tmp_path / "none.png", samples=0)
    assert not (tmp_path / "none.png").exists()
    with pytest.raises(TypeError, match=r"a batch .* or a jaxload loader, not list"):
        show([1, 2], tmp_path / "none.png")
    with pytest.raises(FileNotFoundError, match=r"none.png: its folder .*/nowhere does not"):
        show(mixture_batch(), tmp_path / "nowhere" / "none.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.png"]  # no temporary left


def test_jaxload_show_is_the_function():
    assert jaxload.show is show
    assert "show" in dir(jaxload)


PROBE = """
import sys
import jaxload
before = sorted(m for m in sys.modules if m == "PIL" or m.startswith("jaxload.tools"))
jaxload.show
print(before, "jaxload.tools.show" in sys.modules)
"""


@pytest.mark.processes
def test_import_jaxload_loads_neither_show_nor_pillow():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[] True"


# --- real datasets ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """`one`: 10 fps, cameras top 48x64 and wrist 64x64, 4-dim state and action, short
    episodes (so windows pad); `other`: 15 fps, one camera front 48x80, 6 dims, no wrist."""
    from jaxload.converters.convert import convert
    from tests.support.lerobot_factory import write_lerobot_v3

    root = tmp_path_factory.mktemp("show")
    one = write_lerobot_v3(
        root / "src_one",
        episode_lengths=(3, 5, 9),
        cameras={"observation.images.top": (48, 64), "observation.images.wrist": (64, 64)},
    )
    other = write_lerobot_v3(
        root / "src_other",
        fps=15,
        episode_lengths=(4, 7),
        cameras={"observation.images.front": (48, 80)},
        state_dim=6,
        action_dim=6,
        episode_tasks=["drive to the kitchen", "dock"],
    )
    out = {"one": root / "one", "other": root / "other"}
    convert(one, out["one"], workers=1, progress=False)
    convert(other, out["other"], workers=1, progress=False)
    return out


@pytest.mark.integration
def test_a_loaders_sheet_shows_its_next_batch_and_leaves_it_unmoved(converted, tmp_path):
    def loader():
        return jaxload.make_loader(
            converted["one"], global_batch_size=6, seed=1,
            delta_frames={"action": range(6), "observation.images.top": [-2, -1, 0]},
            options=jaxload.PipelineOptions(num_workers=0), host_index=0, host_count=1,
        )  # fmt: skip

    shown, plain = loader(), loader()
    next(shown), next(plain)  # from the second batch on
    layout = show(shown, tmp_path / "sheet.png")
    assert shown.position == 6
    batch = next(shown)
    expected = next(plain)
    assert all(np.array_equal(batch[k], expected[k]) for k in expected)  # not moved
    pixels = png(tmp_path / "sheet.png")
    assert pixels.shape[:2] == layout.size[::-1] and len(layout.rows) == 6
    row = layout.rows[0]
    assert [len(s) for s in row.cameras.values()] == [3, 1]  # top's window, wrist's frame
    check_marks(pixels, layout, batch)
    _, title = collect(batch)
    assert "6 samples" in title
    assert batch["observation.images.top_is_pad"].any() and batch["action_is_pad"].any()
    named, _ = collect(loader())
    ds = jaxload.open(converted["one"])
    assert all(r.dataset.endswith("one") and r.fps == 10 for r in named)
    assert [r.task for r in named] == [ds[int(i)]["task"] for i in next(loader())["index"]]
    assert [r.position for r in named] == list(range(6))
    top = next(c for c in named[0].cameras if c.key == "observation.images.top")
    assert top.offsets == (-2, -1, 0)  # the slots' labels: t-2, t-1, t
    once = jaxload.make_loader(
        converted["one"], global_batch_size=6, num_epochs=1,
        options=jaxload.PipelineOptions(num_workers=0), host_index=0, host_count=1,
    )  # fmt: skip
    for _ in once:
        pass
    with pytest.raises(ValueError, match=r"no next batch \(its 1 epochs are read\)"):
        show(once, tmp_path / "end.png")
    assert not (tmp_path / "end.png").exists()
    assert named[0].series[0].scale.startswith("dataset's stats: ")


def _mixture(converted, **kw):
    return jaxload.make_loader(
        [jaxload.DatasetSource(converted["one"], cameras={
             PRIMARY: "observation.images.top", WRIST: "observation.images.wrist"}),
         jaxload.DatasetSource(converted["other"], cameras={
             PRIMARY: "observation.images.front", WRIST: None})],
        global_batch_size=8, seed=0,
        delta_frames={"action": range(8), "observation.images.top": [-1, 0],
                      "observation.images.front": [-1, 0]},
        image_transforms=[jaxload.transforms.Resize((40, 40))],
        options=jaxload.PipelineOptions(num_workers=0), host_index=0, host_count=1, **kw,
    )  # fmt: skip


@pytest.mark.integration
def test_a_mixture_sheet_marks_the_missing_wrist_camera_and_padded_dims(converted, tmp_path):
    loader = _mixture(converted)
    batch_layout = show(_mixture(converted), tmp_path / "mix.png", samples=8)
    batch = next(loader)
    pixels = png(tmp_path / "mix.png")
    ids = check_marks(pixels, batch_layout, batch)
    assert set(ids) == {0, 1}
    for r, row in enumerate(batch_layout.rows):
        (x0, y0, x1, y1), = row.cameras[WRIST]  # fmt: skip
        assert (edge(pixels, (x0, y0, x1, y1)) == draw.MISSING_FILL) == (ids[r] == 1)
        assert x1 - x0 == L.FRAME_HEIGHT  # resized to 40x40: square
        cells = row.dims["action"]
        assert len(cells) == 6
        assert [at(pixels, c[0] + 1, c[1] + 1) == draw.PAD_COLOR for c in cells] == [
            ids[r] == 0 and d >= 4 for d in range(6)
        ]
    rows, title = collect(_mixture(converted))
    assert "of 2 datasets" in title
    assert {r.fps for r in rows} == {10, 15} and {r.dataset_index for r in rows} == {0, 1}
    assert all(r.cameras[1].missing == (r.dataset_index == 1) for r in rows)
    assert {r.task for r in rows if r.dataset_index == 1} <= {"drive to the kitchen", "dock"}


@pytest.mark.integration
def test_the_command_draws_a_mixture_from_a_sources_file(converted, tmp_path, capsys):
    sources = [
        {"path": str(converted["one"]),
         "cameras": {PRIMARY: "observation.images.top", WRIST: "observation.images.wrist"}},
        {"path": str(converted["other"]), "cameras": {PRIMARY: "observation.images.front",
                                                      WRIST: None}},
    ]  # fmt: skip
    (tmp_path / "sources.json").write_text(json.dumps(sources))
    out = tmp_path / "sheet.png"
    status = main(["show", str(tmp_path / "sources.json"), "--samples", "5", "--resize",
                   "40x40", "--out", str(out), "--frames", "action=0:8"])  # fmt: skip
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert printed.startswith(f"wrote {out}: 5 samples, ")
    lines = printed.splitlines()[1:]
    assert len(lines) == 5 and png(out).shape[0] > 5 * L.FRAME_HEIGHT
    for line in lines:
        other = "other (dataset_index 1)" in line
        assert other or "one (dataset_index 0)" in line
        assert (f"{WRIST} missing" in line) == other
        assert ("action dims 4..5 padded" in line) == (not other)
    sources[1]["weight"] = 0.5  # a weight on one source only: a multiplier of a rule
    (tmp_path / "sources.json").write_text(json.dumps(sources))
    args = ["show", str(tmp_path / "sources.json"), "--resize", "40x40", "--out", str(out)]
    assert main(args) == 1
    said = capsys.readouterr().err
    assert "--weights frames" in said and "unexpected" not in said, said
    assert main([*args, "--weights", "frames", "--samples", "2"]) == 0


@pytest.mark.integration
def test_the_command_defaults_and_bad_input(converted, tmp_path, capsys):
    out = tmp_path / "sheet.png"
    assert main(["show", str(converted["one"]), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "6 samples" in printed and out.exists()
    assert "action steps" in printed  # the default window: action 0..15 frames, padded
    bad = tmp_path / "z.png"
    assert main(["show", str(converted["one"]), "--samples", "0", "--out", str(bad)]) == 1
    assert "--samples 0: give at least 1" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps([{"path": "x", "camera": {}}]))
    assert main(["show", str(tmp_path / "bad.json"), "--out", str(tmp_path / "z.png")]) == 1
    err = capsys.readouterr().err
    assert "bad.json: entry 0: unknown fields ['camera']; fields are path, " in err
    assert not (tmp_path / "z.png").exists()
    with pytest.raises(SystemExit):
        main(["show", str(converted["one"]), "--frames", "action"])
    assert "expected KEY=START:STOP" in capsys.readouterr().err


@pytest.mark.integration
def test_info_points_to_show_and_draws_with_show(converted, tmp_path, capsys):
    assert main(["info", str(converted["one"])]) == 0
    assert f"a picture of its samples: jaxload show {converted['one']}" in capsys.readouterr().out
    out = tmp_path / "info.png"
    assert main(["info", str(converted["one"]), "--show", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: 6 samples" in printed and "action steps" in printed
    assert png(out).shape[1] > 600
    assert main(["info", str(converted["one"]), "--json", "--show", str(out)]) == 1
    assert "--json prints metadata only" in capsys.readouterr().err
