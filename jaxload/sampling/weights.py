"""Mixture weights the way mixture papers set them, and the table a loader logs at start.

Explicit weights (`weights=[0.7, 0.3]`) stay as they are. `MixtureWeights` derives them
from the datasets' sizes instead:

    w_d = m_d * min(size_d, cap) ** (1 / temperature),  then shares capped at max_share

* `by`: the size counted, "frames" (the selected episodes' frames; Open X-Embodiment's
  `balance_weights`), "anchors" (frames that can be sampled, after the drops: the loader's
  default, like concatenating the datasets), "episodes", or "uniform" (every size 1);
* `m_d`: each `DatasetSource(weight=...)`, a multiplier here (default 1), as OXE's
  per-dataset sample weights multiply the size-balanced ones;
* `temperature` > 1 flattens towards uniform (T5/mT5's temperature sampling; 1: by size);
* `cap`: T5's examples-proportional mixing limit K, in units of `by`: a dataset larger
  than `cap` counts as `cap`;
* `max_share`: no dataset takes more than this share of a batch; the excess goes to the
  others in proportion to their weights (water-filling), so shares still sum to 1.

The loader then rounds the weights into exact per-block quotas (jaxload.sampling.mixture).

    rule = MixtureWeights(by="frames", temperature=2.0, max_share=0.4)
    rule.resolve({"frames": [1000, 250, 40]})        # -> shares summing to 1
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxload.sampling.mixture import normalized

SIZES = ("frames", "anchors", "episodes", "uniform")


@dataclasses.dataclass(frozen=True)
class MixtureWeights:
    """Mixture weights from the datasets' sizes (see the module doc for the formula).

    Attributes:
        by: "frames", "anchors", "episodes" or "uniform": the size a weight follows.
        temperature: sizes are raised to 1 / temperature (> 0; 1: proportional).
        cap: sizes above it count as it (None: no cap).
        max_share: the largest share of a batch one dataset may take (None: no limit).

    Example::

        loader = jaxload.make_loader(paths, global_batch_size=256,
                                     weights=jaxload.MixtureWeights(by="frames", temperature=2))
        print(loader.mixture_table())  # dataset, frames, weight, share of a batch, epochs per 1M
    """

    by: str = "frames"
    temperature: float = 1.0
    cap: float | None = None
    max_share: float | None = None

    def __post_init__(self) -> None:
        if self.by not in SIZES:
            raise ValueError(f"MixtureWeights(by={self.by!r}): choose one of {SIZES}")
        if not _positive(self.temperature):
            raise ValueError(
                f"MixtureWeights(temperature={self.temperature!r}): must be a number > 0"
            )
        if self.cap is not None and not _positive(self.cap):
            raise ValueError(f"MixtureWeights(cap={self.cap!r}): must be a number > 0, or None")
        if self.max_share is not None and not (_positive(self.max_share) and self.max_share <= 1):
            raise ValueError(
                f"MixtureWeights(max_share={self.max_share!r}): must be within (0, 1], or None"
            )

    def resolve(
        self, sizes: Mapping[str, Sequence[float]], multipliers: Sequence[float] | None = None
    ) -> np.ndarray:
        """Each dataset's share (summing to 1) from `sizes` ({"frames": [...], ...}: at
        least the one `by` names) and optional per-dataset multipliers."""
        n = len(next(iter(sizes.values())))
        size = np.ones(n) if self.by == "uniform" else np.asarray(sizes[self.by], np.float64)
        if self.cap is not None:
            size = np.minimum(size, self.cap)
        # Each factor scaled to a maximum of 1 first: products of huge ones overflow.
        w = (size / max(size.max(), 1e-300)) ** (1.0 / self.temperature)
        if multipliers is not None:
            m = np.asarray(multipliers, np.float64)
            w = w * (m / max(m.max(), 1e-300))
        if w.sum() <= 0:
            raise ValueError(
                f"MixtureWeights(by={self.by!r}): every dataset has weight 0 (sizes "
                f"{size.tolist()}, multipliers {multipliers})"
            )
        w = normalized(w)
        return w if self.max_share is None else _cap_shares(w, self.max_share)


def as_weight_rule(weights: Any) -> MixtureWeights | None:
    """make_loader's `weights` as a rule: a MixtureWeights, or a size name ("frames",
    "anchors", "episodes", "uniform") for `MixtureWeights(by=...)`; None for a list."""
    if isinstance(weights, MixtureWeights):
        return weights
    if isinstance(weights, str):
        return MixtureWeights(by=weights)
    return None


def _cap_shares(w: np.ndarray, max_share: float) -> np.ndarray:
    """Shares with none above max_share, the excess spread over the others by weight."""
    positive = int(np.count_nonzero(w))
    if max_share * positive < 1 - 1e-12:
        raise ValueError(
            f"MixtureWeights(max_share={max_share}) cannot be met by {positive} datasets of "
            f"positive weight (their shares would sum to at most {max_share * positive:g})"
        )
    out = w.copy()
    fixed = np.zeros(len(w), bool)
    while True:
        over = (out > max_share + 1e-12) & ~fixed
        if not over.any():
            return out
        fixed |= over
        out[fixed] = max_share
        free = ~fixed
        rest = 1 - max_share * fixed.sum()
        out[free] = w[free] / w[free].sum() * rest


def _positive(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def weights_table(
    names: Sequence[str],
    frames: Sequence[int],
    episodes: Sequence[int],
    anchors: Sequence[int],
    weights: Sequence[float],
    shares: Sequence[float],
) -> str:
    """The mixture as a table: per dataset its episodes and frames, its weight (normalized),
    its exact share of a batch (after the block quotas), and how many of its epochs (of
    anchors) one million samples hold."""
    w = normalized(weights)
    rows = [("dataset", "episodes", "frames", "weight", "share of a batch", "epochs per 1M")]
    for name, f, e, a, weight, share in zip(
        names, frames, episodes, anchors, w, shares, strict=True
    ):
        epochs = share * 1e6 / a if a else float("inf")
        rows.append(
            (str(name), f"{e:,}", f"{f:,}", f"{weight:.4f}", f"{share:.2%}", f"{epochs:,.1f}")
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.ljust(wd) if i == 0 else c.rjust(wd) for i, (c, wd) in enumerate(zip(r, widths))
        )
        for r in rows
    ]
    return "\n".join(lines)
