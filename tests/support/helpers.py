"""Small helpers shared by tests (no fixtures here: those live in conftest.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two images with values in 0..255 (inf when identical)."""
    mse = np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under root (relative path -> content), to compare outputs byte for byte."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def leftovers(parent: Path, name: str) -> list[Path]:
    """Anything a conversion to parent/name left behind: the output or hidden temp dirs."""
    return [p for p in parent.iterdir() if p.name == name or p.name.startswith(f".{name}.tmp")]


def converted(tmp_path_factory, src: Path, name: str | None = None, **kwargs) -> Path:
    """A conversion of `src` (convert's keyword arguments), made once per session and shared
    by every test module that asks for the same `name` (default: the source's)."""
    from jaxload.converters.convert import convert

    out = tmp_path_factory.getbasetemp() / "converted" / (name or src.name)
    if not out.exists():
        out.parent.mkdir(exist_ok=True)
        convert(src, out, workers=1, progress=False, **kwargs)
    return out
