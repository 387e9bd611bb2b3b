"""A/B verdicts: is the head slower than the base, by more than noise and more than min_effect?

Input per side is a list of rounds, each round the per-call latencies (µs) one process measured.
Rounds alternate base/head in one job on one GPU, so drift within the job hits both sides alike.

Two interval methods, both percentile bootstraps of the ratio head/base:

* `pooled` — all rounds of a side pooled, resampled as one sample (history.statistics
  `bootstrap_median_ratio`; Efron & Tibshirani 1993, ch. 13). It ignores that each process has
  its own median offset (0.04–1.2% on an H200), so its interval is too narrow when rounds differ.
* `hierarchical` — the two-level bootstrap (Davison & Hinkley 1997, §3.8; Saravanan et al. 2020,
  "Application of the hierarchical bootstrap to multi-level data in neuroscience"): resample
  rounds with replacement (paired: round i of base goes with round i of head, which ran next to
  it), then samples within each chosen round; the statistic is the mean of per-round medians.
  Between-process variation thus enters the interval. With few rounds the outer level is coarse
  and still somewhat optimistic (factor (R-1)/R on the variance), which min_effect absorbs.

Verdict (docs/design.md, "Detection"): regression when the interval's lower bound exceeds 1 + min_effect,
improvement when its upper bound is below 1 / (1 + min_effect), otherwise no change.
scripts/detection_power.py measures both methods' power and false-alarm rate on real noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from history.statistics import bootstrap_median_ratio

METHODS = ("hierarchical", "pooled")
VERDICTS = ("regression", "improvement", "no change")


@dataclass(frozen=True)
class ABInterval:
    ratio: float  # point estimate of head/base
    low: float
    high: float
    confidence: float
    method: str
    rounds: int


def _as_rounds(rounds: Sequence[Sequence[float]], side: str) -> list[np.ndarray]:
    out = [np.asarray(r, dtype=np.float64) for r in rounds]
    if not out or any(r.size == 0 for r in out):
        raise ValueError(f"{side}: every round needs at least one sample")
    if any(not np.all(np.isfinite(r)) or np.any(r <= 0) for r in out):
        raise ValueError(f"{side}: latencies must be finite and positive")
    return out


def _round_median_draws(rounds: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, R): for each round, medians of `resamples` within-round bootstrap resamples."""
    draws = np.empty((resamples, len(rounds)))
    for j, r in enumerate(rounds):
        draws[:, j] = np.median(r[rng.integers(0, r.size, size=(resamples, r.size))], axis=1)
    return draws


def hierarchical_ratio(
    base_rounds: Sequence[Sequence[float]],
    head_rounds: Sequence[Sequence[float]],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> ABInterval:
    """Two-level (rounds, then samples) percentile bootstrap of mean-of-round-medians ratio.

    Cost: O(resamples * total samples) for the inner level plus O(resamples * R) for the outer.
    Rounds are paired when both sides have the same count, else resampled independently.
    """
    base = _as_rounds(base_rounds, "base")
    head = _as_rounds(head_rounds, "head")
    rng = np.random.default_rng(seed)
    b_draws = _round_median_draws(base, resamples, rng)
    h_draws = _round_median_draws(head, resamples, rng)
    rows = np.arange(resamples)[:, None]
    b_pick = rng.integers(0, len(base), size=(resamples, len(base)))
    h_pick = b_pick if len(head) == len(base) else rng.integers(0, len(head), size=(resamples, len(head)))
    ratios = h_draws[rows, h_pick].mean(axis=1) / b_draws[rows, b_pick].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    point = float(np.mean([np.median(r) for r in head]) / np.mean([np.median(r) for r in base]))
    return ABInterval(point, float(low), float(high), confidence, "hierarchical", min(len(base), len(head)))


def pooled_ratio(
    base_rounds: Sequence[Sequence[float]],
    head_rounds: Sequence[Sequence[float]],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> ABInterval:
    """Single-level bootstrap over all samples of each side pooled (ignores round structure)."""
    base = np.concatenate(_as_rounds(base_rounds, "base"))
    head = np.concatenate(_as_rounds(head_rounds, "head"))
    iv = bootstrap_median_ratio(base, head, confidence=confidence, resamples=resamples, seed=seed)
    return ABInterval(iv.ratio, iv.low, iv.high, confidence, "pooled", min(len(base_rounds), len(head_rounds)))


def ratio_interval(base_rounds, head_rounds, *, method: str = "hierarchical", confidence: float = 0.95,
                   resamples: int = 2000, seed: int = 0) -> ABInterval:
    if method == "hierarchical":
        return hierarchical_ratio(base_rounds, head_rounds, confidence, resamples, seed)
    if method == "pooled":
        return pooled_ratio(base_rounds, head_rounds, confidence, resamples, seed)
    raise ValueError(f"unknown interval method {method!r}; known: {', '.join(METHODS)}")


def verdict(interval: ABInterval, min_effect: float) -> str:
    """'regression' if low > 1+min_effect; 'improvement' if high < 1/(1+min_effect); else 'no change'."""
    if interval.low > 1.0 + min_effect:
        return "regression"
    if interval.high < 1.0 / (1.0 + min_effect):
        return "improvement"
    return "no change"
