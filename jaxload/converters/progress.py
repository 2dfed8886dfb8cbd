"""What a conversion tells its user: a progress bar while it runs, a summary at the end.

The bar counts frames (so its ETA weighs long episodes right) and shows episodes, frames/s
and input MB/s; rates count only this run's work, not units a crashed run finished.

    convert:  41%|████▏     | 512/1247 frames, 6/14 episodes, 402 frames/s, 0.61 MB/s in [00:01<00:01]

The summary's size lines come from `converters.sizes` (which way the ratio runs, how much
of it is re-encoding, fixed costs apart from per-frame ones).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

if TYPE_CHECKING:
    from jaxload.converters.sizes import ConversionSizes


class ProgressBar:
    """A tqdm bar over frames; `unit_done` after each finished unit."""

    def __init__(
        self,
        *,
        total_frames: int,
        total_episodes: int,
        done_frames: int,
        done_episodes: int,
        enabled: bool,
    ):
        self.total_episodes = total_episodes
        self.episodes = done_episodes
        self.frames = 0  # this run's
        self.input_bytes = 0  # this run's
        self.started = time.perf_counter()
        self._bar = tqdm(
            total=total_frames,
            initial=done_frames,
            desc="convert",
            unit="frame",
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} frames{postfix} "
            "[{elapsed}<{remaining}]",
        )
        self._refresh()

    def unit_done(self, frames: int, episodes: int, input_bytes: int) -> None:
        self.frames += frames
        self.episodes += episodes
        self.input_bytes += input_bytes
        self._refresh(draw=False)
        self._bar.update(frames)

    def _refresh(self, draw: bool = True) -> None:
        seconds = max(time.perf_counter() - self.started, 1e-9)
        self._bar.set_postfix_str(
            f"{self.episodes}/{self.total_episodes} episodes, "
            f"{self.frames / seconds:.0f} frames/s, "
            f"{self.input_bytes / 2**20 / seconds:.2f} MiB/s in",
            refresh=draw,
        )

    def close(self) -> None:
        self._bar.close()


@dataclasses.dataclass
class ConvertReport:
    """What a conversion did, printed at the end of `jaxload convert`."""

    out: Path | str  # a URL when the dataset was uploaded to object storage
    episodes: int
    frames: int
    seconds: float
    source_bytes: int
    output_bytes: int
    psnr: dict[str, tuple[float, float]]  # camera -> (min, mean) dB
    source: str = ""  # where it came from, e.g. "hf://datasets/lerobot/pusht@main (v3.0)"
    engine: str = "inline"
    workers: int = 1
    units: int = 0
    resumed_units: int = 0
    retries: int = 0
    balance_lpt: float = 1.0  # expected max/mean per-worker cost, costliest first
    balance_round_robin: float = 1.0  # the same for round-robin hand-out
    worker_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    sizes: ConversionSizes | None = None  # where the output's bytes go, beside the source's
    camera_crf: dict[str, int] = dataclasses.field(default_factory=dict)  # chosen by a target
    upload: str = ""  # what the upload to object storage did (converters/publish.py)
    earlier: bool = False  # converted by an earlier run: this one only finished up

    @property
    def input_mb_per_s(self) -> float:
        return self.source_bytes / 2**20 / max(self.seconds, 1e-9)

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / max(self.seconds, 1e-9)

    @property
    def realized_balance(self) -> float:
        """max / mean of the busy seconds of the workers that ran units (this run)."""
        busy = list(self.worker_seconds.values())
        return max(busy) / (sum(busy) / len(busy)) if busy and sum(busy) > 0 else 1.0

    def summary(self) -> str:
        if self.earlier:  # nothing was read or converted now: no rates, no ratios
            lines = [
                f"wrote {self.out}: {self.episodes} episodes, {self.frames} frames, converted "
                f"by an earlier run of this command (this run finished in {self.seconds:.1f} s)",
                f"output: {_mb(self.output_bytes)}",
            ]
            return "\n".join(lines + ([self.upload] if self.upload else []))
        seconds = max(self.seconds, 1e-9)
        lines = [
            f"wrote {self.out}: {self.episodes} episodes, {self.frames} frames "
            f"in {self.seconds:.1f} s ({self.frames / seconds:.0f} frames/s, "
            f"{self.episodes / seconds:.2f} episodes/s)",
            f"input: {_mb(self.source_bytes)} ({self.input_mb_per_s:.2f} MiB/s)"
            + (f" from {self.source}" if self.source else ""),
            *self._size_lines(),
            f"work: {self.units} units on {self.workers} {self.engine} worker(s), "
            f"cost balance max/mean {self.balance_lpt:.2f} "
            f"(round-robin would be {self.balance_round_robin:.2f})"
            + (f", {self.resumed_units} units resumed" if self.resumed_units else "")
            + (f", {self.retries} transient errors retried" if self.retries else ""),
        ]
        for cam, (lo, mean) in self.psnr.items():
            crf = self.camera_crf.get(cam)
            chosen = f" (crf {crf}, chosen for the fidelity target)" if crf is not None else ""
            if math.isinf(lo):  # every frame decodes to its source exactly (PSNR inf)
                lines.append(f"fidelity {cam}: exact (every frame identical to the source)")
            else:
                lines.append(f"fidelity {cam}: PSNR min {lo:.2f} dB, mean {mean:.2f} dB{chosen}")
        if self.upload:
            lines.append(self.upload)
        return "\n".join(lines)

    def _size_lines(self) -> list[str]:
        if self.sizes is not None:
            return self.sizes.lines()
        ratio = self.output_bytes / max(self.source_bytes, 1)
        return [f"output: {_mb(self.output_bytes)}; output is {ratio:.2f}x the source"]


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"
