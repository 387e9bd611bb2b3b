"""Long kernels on a power-capped GPU: per-sample clocks, pacing, the clock band, the
clock-normalised median. Pure logic (no GPU); the timers and the sampler call it.

Why. On an H200 (700 W cap) every FlashAttention-paper case over 1 ms ran with NVML's
`sw_power_cap` active and the SM clock moving between 1515 and 1980 MHz; such cases reached
IQR/median 6.4% (median) against 0.99% under 0.5 ms (issue #31). attnwatch never changes clock
or power settings (tritonbench locks clocks, which needs root); it measures the clock instead and
offers three remedies that leave the clocks alone, chosen per run (a recipe, ci/run_config.toml
[timing.recipes]) and stored with every result (CaseTiming.timing_recipe):

* **clock record**: the SM clock of each sample, from NVML reads the host takes while the block
  runs (`assign_clocks`), summarised per case. With it the clock-normalised median
  `median(t_i * f_i / f_ref)` is stored BESIDE the latency under its own name, never in its
  place; f_ref is a declared reference clock or the GPU's maximum SM clock. This is the
  cycle-space view nvbench's robust compare uses (time x SM clock); it is exact for work bound
  by the SM clock and over-corrects memory-bound work, whose time does not scale with it.
* **pacing**: an idle gap before each timed call (a one-thread device spin, so the stream never
  goes idle and host dispatch stays out of the samples) sized either from the sample's own
  duration (`duty`: busy fraction d, gap = t * (1/d - 1)) or from the measured power draw
  (`power`: the busy fraction follows margin * enforced limit / power draw, `PacingPolicy`), so
  the GPU works below its cap. Its cost is wall time, reported (CaseTiming.pacing_gap_s).
* **band**: samples whose clock lies more than a relative half-width from the modal clock are
  discarded from the statistics, and counted (CaseTiming.band_discarded_samples).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from attnwatch.history.analysis.statistics import median

PACING_MODES = ("none", "duty", "power")


def assign_clocks(calls: int, readings: Sequence[tuple[int, float]]) -> list[float | None]:
    """Per call of a block, the mean of the SM-clock readings taken while it was the call in
    flight (`readings`: (index of the first unfinished call, MHz), as the host polled them).

    A call that got no reading of its own (shorter than one read) takes the nearest later
    reading, else the nearest earlier one; None when the block got no reading at all."""
    sums: dict[int, list[float]] = {}
    for index, mhz in readings:
        if 0 <= index < calls and mhz:
            sums.setdefault(index, []).append(float(mhz))
    own = [float(np.mean(sums[i])) if i in sums else None for i in range(calls)]
    out: list[float | None] = list(own)
    later: float | None = None
    for i in range(calls - 1, -1, -1):
        if own[i] is not None:
            later = own[i]
        elif later is not None:
            out[i] = later
    earlier: float | None = None
    for i in range(calls):
        if out[i] is not None:
            earlier = out[i]
        else:
            out[i] = earlier
    return out


def modal_clock(clocks: Sequence[float]) -> float | None:
    """The most frequent clock (NVML reports discrete steps; a per-sample mean is rounded to
    whole MHz first); ties go to the higher clock."""
    values = [round(c) for c in clocks if c]
    if not values:
        return None
    counts = Counter(values)
    top = max(counts.values())
    return float(max(v for v, n in counts.items() if n == top))


def band_keep(clocks: Sequence[float | None], band: float) -> list[bool]:
    """Which samples lie within `band` (relative half-width) of the modal clock; with band <= 0,
    or no clock at all, every sample is kept. A sample without a clock reading is kept only when
    the band is off: in a band run an unknown clock cannot be said to be inside it."""
    if band <= 0:
        return [True] * len(clocks)
    mode = modal_clock([c for c in clocks if c is not None])
    if mode is None:
        return [True] * len(clocks)
    return [c is not None and abs(c - mode) <= band * mode for c in clocks]


def normalised(samples_us: Sequence[float], clocks: Sequence[float | None], reference_mhz: float) -> list[float]:
    """t_i * f_i / f_ref for every sample with a clock (cycle-space time at the reference clock)."""
    return [t * c / reference_mhz for t, c in zip(samples_us, clocks) if c]


def duty_gap_us(busy_us: float, duty: float) -> float:
    """The idle gap that makes a call of `busy_us` take `duty` of the wall time."""
    if not 0 < duty <= 1:
        raise ValueError(f"pacing duty must be in (0, 1], got {duty}")
    return max(0.0, busy_us * (1.0 / duty - 1.0))


@dataclass
class PacingPolicy:
    """Idle gap before each timed call, per subject (the sampler asks before each block).

    `mode` "none": no gap. "duty": gap = t * (1/duty - 1), t the median call of the subject's
    last block. "power": a busy fraction d per subject, starting at 1 and updated after each
    block from NVML's power draw P and enforced limit L: d <- clamp(d * margin * L / P,
    min_duty, 1), and at most d * margin while a power-cap reason is active (under the cap, P
    reads about L, so the ratio alone would hardly move). Average power scales with the busy
    fraction, so d settles where the draw sits at margin * L, below the cap, and the clock stays
    where the power manager puts an uncapped GPU.
    """

    mode: str = "none"
    duty: float = 1.0
    margin: float = 0.9
    min_duty: float = 0.2
    min_call_us: float = 0.0  # calls shorter than this are not paced (ci/run_config.toml pacing_min_call_us)
    _busy: dict[object, float] = field(default_factory=dict)
    _duty: dict[object, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in PACING_MODES:
            raise ValueError(f"pacing must be one of {PACING_MODES}, got {self.mode!r}")
        duty_gap_us(1.0, self.duty)  # validates
        if not 0 < self.margin <= 1 or not 0 < self.min_duty <= 1:
            raise ValueError("pacing margin and min_duty must be in (0, 1]")

    def busy_fraction(self, key: object = None) -> float:
        if self.mode == "duty":
            return self.duty
        if self.mode == "power":
            return self._duty.get(key, 1.0)
        return 1.0

    def gap_us(self, key: object = None) -> float:
        """The gap before each call of the subject's next block (0 until a block was seen)."""
        busy = self._busy.get(key)
        if self.mode == "none" or busy is None or busy < self.min_call_us:
            return 0.0
        return duty_gap_us(busy, self.busy_fraction(key))

    def after_block(
        self,
        samples_us: Sequence[float],
        key: object = None,
        power_w: float | None = None,
        limit_w: float | None = None,
        capped: bool = False,
    ) -> None:
        """Record a block: its median call and (mode power) the draw."""
        if not samples_us:
            return
        self._busy[key] = float(np.median(samples_us))
        if self.mode != "power" or not power_w or not limit_w:
            return
        d = self._duty.get(key, 1.0)
        new = d * self.margin * limit_w / power_w
        if capped:
            new = min(new, d * self.margin)
        self._duty[key] = min(1.0, max(self.min_duty, new))


@dataclass
class ClockSummary:
    """What a case's per-sample clocks add to its CaseTiming (all None without a clock record)."""

    sm_clock_median_mhz: float | None = None
    sm_clock_min_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    reference_clock_mhz: float | None = None
    clock_normalised_median_us: float | None = None
    band_discarded_samples: int | None = None


def summarize_clocks(
    samples_us: Sequence[float], clocks: Sequence[float | None], reference_mhz: float | None, band: float
) -> tuple[list[float], ClockSummary]:
    """The samples the latency statistics use (within the band when one is set) and the clock
    summary. Without any clock reading: every sample, an empty summary."""
    known = [c for c in clocks if c]
    if not known:
        return list(samples_us), ClockSummary()
    keep = band_keep(clocks, band)
    kept = [t for t, k in zip(samples_us, keep) if k]
    kept_clocks = [c for c, k in zip(clocks, keep) if k]
    summary = ClockSummary(
        sm_clock_median_mhz=float(np.median(known)),
        sm_clock_min_mhz=float(min(known)),
        sm_clock_max_mhz=float(max(known)),
        reference_clock_mhz=reference_mhz,
        band_discarded_samples=(len(samples_us) - len(kept)) if band > 0 else None,
    )
    if reference_mhz:
        values = normalised(kept, kept_clocks, reference_mhz)
        if values:
            summary.clock_normalised_median_us = median(values)
    return kept, summary
