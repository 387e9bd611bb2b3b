"""Change points in a per-run series (one case on one GPU, ordered by commit), as pure functions.

Method: penalised least-squares segmentation solved exactly by PELT (Killick, Fearnhead & Eckley
2012, "Optimal detection of changepoints with a linear computational cost", JASA 107:1590),
through the maintained `ruptures` library (Truong, Oudre & Vayatis 2020). `ruptures.KernelCPD`
with the linear kernel is that same l2 cost with PELT's penalised search, implemented in C
(Arlot, Celisse & Harchaoui 2019): identical change points to `ruptures.Pelt(model="l2")`
on our series, about 200x faster. The cost is taken on log values so that a step is a
relative change and one penalty fits fast and slow kernels alike.

Penalty from the series' own noise: sigma is estimated robustly from successive differences,
sigma = 1.4826 * MAD(diff(x)) / sqrt(2) (the difference of two independent N(0, s^2) points has
sd s*sqrt(2); 1.4826 makes the MAD consistent for a normal; a step only touches one
difference, so it hardly inflates the estimate). The penalty per change point is then
beta * sigma^2 * ln(n), the Schwarz/BIC form (Yao 1988, "Estimating the number of
change-points via Schwarz' criterion"), with beta = 2 for the new mean and the location.

Cost: PELT is O(n) expected for a series of n runs (O(n^2) worst case); the noise estimate O(n).
Measured: about 1 ms per 139-run series on a 2-core CPU (docs/benchmarks/detection.md, Detection quality).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import ruptures

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Step:
    """A level shift: `index` is the first point of the new level (0-based, in the series)."""

    index: int
    before: float  # median of the segment before (original units)
    after: float  # median of the segment after
    points_before: int
    points_after: int

    @property
    def ratio(self) -> float:
        return self.after / self.before

    @property
    def change(self) -> float:
        """Relative change, e.g. +0.05 for 5% higher after the step."""
        return self.after / self.before - 1.0


def robust_sigma(values: Sequence[float] | np.ndarray) -> float:
    """Noise sd from the MAD of successive differences (see module docstring). 0 if n < 3."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 3:
        return 0.0
    d = np.diff(x)
    return float(MAD_TO_SIGMA * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def bic_penalty(sigma: float, n: int, scale: float = 2.0) -> float:
    """scale * sigma^2 * ln(n): the per-change-point penalty for an l2 cost."""
    return scale * sigma * sigma * math.log(max(n, 2))


def detect_steps(
    values: Sequence[float] | np.ndarray,
    *,
    min_size: int = 3,
    penalty_scale: float = 2.0,
    sigma_floor: float = 5e-4,
) -> list[Step]:
    """All level shifts PELT finds in a positive series, each with its segment medians.

    Works on ln(values); `sigma_floor` (relative) keeps a flat series from having a zero
    penalty. `min_size` is the shortest segment PELT may create, so every returned step has at
    least `min_size` points on each side. Raises ValueError on non-positive or non-finite data.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size and (not np.all(np.isfinite(x)) or np.any(x <= 0)):
        raise ValueError("change-point series must be finite and positive")
    if x.size < 2 * min_size:
        return []
    logx = np.log(x)
    sigma = max(robust_sigma(logx), sigma_floor)
    pen = bic_penalty(sigma, x.size, penalty_scale)
    ends = ruptures.KernelCPD(kernel="linear", min_size=min_size).fit(logx.reshape(-1, 1)).predict(pen=pen)
    bounds = [0, *ends]
    steps = []
    for k in range(1, len(bounds) - 1):
        start, cut, stop = bounds[k - 1], bounds[k], bounds[k + 1]
        steps.append(
            Step(
                index=cut,
                before=float(np.median(x[start:cut])),
                after=float(np.median(x[cut:stop])),
                points_before=cut - start,
                points_after=stop - cut,
            )
        )
    return steps


def _segments(x: np.ndarray, cuts: list[int]) -> list[Step]:
    bounds = [0, *cuts, x.size]
    return [
        Step(
            index=bounds[k],
            before=float(np.median(x[bounds[k - 1] : bounds[k]])),
            after=float(np.median(x[bounds[k] : bounds[k + 1]])),
            points_before=bounds[k] - bounds[k - 1],
            points_after=bounds[k + 1] - bounds[k],
        )
        for k in range(1, len(bounds) - 1)
    ]


def significant_steps(
    values: Sequence[float],
    *,
    min_effect: float,
    min_persist: int,
    penalty_scale: float = 2.0,
    sigma_floor: float = 5e-4,
) -> list[Step]:
    """Level shifts of at least `min_effect` (either way) that hold for `min_persist` points.

    PELT runs with segments of two points or more, so a lone outlier cannot form a level.
    Change points whose shift is below `min_effect` are then removed smallest first, merging
    their neighbours, so each surviving step compares the whole level before with the whole
    level after (not a noise-sized sliver). Finally a step needs `min_persist` points after it:
    a shift in the last one or two runs waits for confirmation.
    """
    x = np.asarray(values, dtype=np.float64)
    cuts = [s.index for s in detect_steps(x, min_size=2, penalty_scale=penalty_scale, sigma_floor=sigma_floor)]
    threshold = math.log1p(min_effect)
    while cuts:
        steps = _segments(x, cuts)
        weakest = min(steps, key=lambda s: abs(math.log(s.ratio)))
        if abs(math.log(weakest.ratio)) >= threshold:
            break
        cuts.remove(weakest.index)
    return [s for s in _segments(x, cuts) if s.points_after >= min_persist and s.points_before >= min_persist]
