"""A/B verdicts: is the head slower than the base, by more than noise and more than min_effect?

Input per side is a list of rounds, each round the per-call latencies (µs) one process measured.
Rounds alternate base/head in one job on one GPU, so drift within the job hits both sides alike.

Three interval methods for the ratio head/base:

* `rounds-t` (compare's default) — Student's paired t interval over rounds of the log ratio of
  round medians (`rounds_t_ratio`). Honest with few rounds, which the bootstraps below are not.
* `hierarchical` — the two-level bootstrap (Davison & Hinkley 1997, §3.8; Saravanan et al. 2020,
  "Application of the hierarchical bootstrap to multi-level data in neuroscience"): resample
  rounds with replacement (paired: round i of base goes with round i of head, which ran next to
  it), then samples within each chosen round; the statistic is the mean of per-round medians.
  Between-process variation thus enters the interval. With few rounds the outer level cannot
  reach beyond the rounds' range, so its coverage is well below the stated level at 3 rounds
  (`rounds_t_ratio`'s docstring has a recorded case). The dashboard's Compare of two runs uses it.
* `pooled` — all rounds of a side pooled, resampled as one sample (history.analysis.statistics
  `bootstrap_median_ratio`; Efron & Tibshirani 1993, ch. 13). It ignores that each process has
  its own median offset (0.04–1.2% on an H200), so its interval is too narrow when rounds differ.

Verdict (docs/design.md, "Detection"): a change must be both real and material. Regression: the
interval lies above 1 (the rounds' noise cannot explain the slowdown) and the point estimate is
at least 1 + min_effect (it is as large as the GPU's threshold); improvement mirrored (interval
below 1, point at most 1 / (1 + min_effect)); otherwise no change. This is a significance test
joined to a minimum practically significant difference (Lakens 2017, "Equivalence tests",
Soc. Psychol. Personal. Sci. 8:355, on separating statistical from practical significance).

Why not "the whole interval beyond 1 + min_effect" (the rule before 2026-11-23): its effective
threshold was min_effect plus the interval's half-width, so it moved with a case's noise. On the
H200, slowdowns of +2.3% to +2.7% on ~20 µs cases stayed undecided after 8 rounds while +2.1%
on 40 µs cases were flagged. Why not significance alone: each side of a compare is one worker
process, and whatever a process keeps for its life is an offset no round varies (until the
stream pool, the launch cost of the one stream it timed on: shared by most of its cases, -0.7%
to +0.6% per compare, docs/benchmarks/compare.md "The PR check on the H200"): in 408 recorded A/A case
verdicts the two-level bootstrap's 99.17% interval excluded 1 in 130, while no point estimate
was beyond ±1.14%. min_effect is what keeps such offsets from being verdicts; the interval
keeps round noise from being one.
scripts/detection_power.py measures power and false alarms on recorded noise and on recorded
compares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence, TypeVar, Union

import numpy as np

from attnwatch.history.analysis.statistics import (
    bootstrap_median_ratio,
    resampled_medians,
    student_t_quantile,
)

METHODS = ("rounds-t", "hierarchical", "pooled")
VERDICTS = ("regression", "improvement", "no change")


@dataclass(frozen=True)
class ABInterval:
    ratio: float  # point estimate of head/base
    low: float
    high: float
    confidence: float
    method: str
    rounds: int


def _as_rounds(rounds: Sequence[Round], side: str) -> list[np.ndarray]:
    out = [np.asarray(r, dtype=np.float64) for r in rounds]
    if not out or any(r.size == 0 for r in out):
        raise ValueError(f"{side}: every round needs at least one sample")
    if any(not np.all(np.isfinite(r)) or np.any(r <= 0) for r in out):
        raise ValueError(f"{side}: latencies must be finite and positive")
    return out


def _round_median_draws(rounds: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(cases, resamples, R): per round, the medians of `resamples` within-round resamples.

    `rounds[j]` is (cases, n_j): round j of every case, all cases with the same n_j. One index
    draw per round serves every case (history.analysis.statistics.resampled_medians reads each
    resample's median from the sorted values, exactly np.median of the same draw).
    """
    draws = []
    for values in rounds:
        n = values.shape[1]
        indices = np.sort(rng.integers(0, n, size=(resamples, n)), axis=1)
        draws.append(resampled_medians(np.sort(values, axis=1), indices))
    return np.stack(draws, axis=2)


def _signature(rounds: list[np.ndarray]) -> tuple[int, ...]:
    return tuple(r.size for r in rounds)


# A case's id, or (run id, case id) when several runs' cases are computed at once (the dashboard).
CaseKey = TypeVar("CaseKey", str, tuple[str, str])
Round = Union[Sequence[float], np.ndarray]  # one round's per-call latencies


def hierarchical_intervals(
    base: Mapping[CaseKey, Sequence[Round]],
    head: Mapping[CaseKey, Sequence[Round]],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[CaseKey, ABInterval]:
    """The two-level bootstrap interval (module doc) for every case in both mappings at once.

    `base[case]` and `head[case]` are that case's rounds (lists of per-call latencies). The one
    implementation of the estimator: `hierarchical_ratio` (compare, PR comments) is this with a
    single case, the dashboard's Compare page calls it with all cases of two runs.

    Cases whose rounds have the same sample counts are resampled together, each group from a
    generator seeded with `seed`: a case's draws depend only on the seed and its round sizes, so
    its interval is the same computed alone or with any other cases (cases in one group share
    index draws; no per-case interval depends on that correlation). Cost: per group,
    O(resamples * n log n) per round for the index draws plus O(cases * resamples * R).
    """
    groups: dict[tuple, list[tuple[CaseKey, list[np.ndarray], list[np.ndarray]]]] = {}
    for case in sorted(set(base) & set(head)):
        b = _as_rounds(base[case], f"{case}: base")
        h = _as_rounds(head[case], f"{case}: head")
        groups.setdefault((_signature(b), _signature(h)), []).append((case, b, h))
    alpha = (1.0 - confidence) / 2.0
    out: dict[CaseKey, ABInterval] = {}
    for members in groups.values():
        rng = np.random.default_rng(seed)
        n_base, n_head = len(members[0][1]), len(members[0][2])
        b_rounds = [np.stack([m[1][j] for m in members]) for j in range(n_base)]
        h_rounds = [np.stack([m[2][j] for m in members]) for j in range(n_head)]
        b_draws = _round_median_draws(b_rounds, resamples, rng)
        h_draws = _round_median_draws(h_rounds, resamples, rng)
        rows = np.arange(resamples)[:, None]
        # Paired when both sides have the same round count: round i of the base ran next to round i of the head.
        b_pick = rng.integers(0, n_base, size=(resamples, n_base))
        h_pick = b_pick if n_head == n_base else rng.integers(0, n_head, size=(resamples, n_head))
        ratios = h_draws[:, rows, h_pick].mean(axis=2) / b_draws[:, rows, b_pick].mean(axis=2)
        lows, highs = np.quantile(ratios, [alpha, 1.0 - alpha], axis=1)
        # The point estimate, every case at once: mean over rounds of the round medians, head/base.
        points = np.mean([np.median(r, axis=1) for r in h_rounds], axis=0) / np.mean(
            [np.median(r, axis=1) for r in b_rounds], axis=0
        )
        for i, (case, _, _) in enumerate(members):
            out[case] = ABInterval(
                float(points[i]), float(lows[i]), float(highs[i]), confidence, "hierarchical", min(n_base, n_head)
            )
    return out


def hierarchical_ratio(
    base_rounds: Sequence[Sequence[float]],
    head_rounds: Sequence[Sequence[float]],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> ABInterval:
    """Two-level (rounds, then samples) percentile bootstrap of the mean-of-round-medians ratio,
    for one case: `hierarchical_intervals` with that case alone.

    Rounds are paired when both sides have the same count, else resampled independently.
    """
    _as_rounds(base_rounds, "base")
    _as_rounds(head_rounds, "head")
    return hierarchical_intervals({"case": base_rounds}, {"case": head_rounds}, confidence, resamples, seed)["case"]


def rounds_t_ratio(
    base_rounds: Sequence[Sequence[float]],
    head_rounds: Sequence[Sequence[float]],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> ABInterval:
    """Student's paired t interval over rounds (Student 1908) of d_i = ln(median of head round i /
    median of base round i), back-transformed: exp(mean d +- t(R-1) s / sqrt R), R = the pairs.

    Each d_i already carries its rounds' sampling noise and the offsets between rounds, so both
    enter once (the two-level bootstrap adds the sampling noise a second time), and the t
    quantile pays for estimating the spread from few rounds, where a bootstrap over 3 rounds
    cannot reach beyond their range (its interval covers far less often than stated: a
    triton_fa2 case whose tuned configuration flipped between rounds, -5.6%, -7.1%, -0.2%, got a
    99.17% interval of [-7.4%, -0.03%] from the bootstrap; from t, [-25%, +21%]). Rounds are
    paired in order (round i of each side ran next to the other, ABBA). With fewer than two pairs
    there is no spread to estimate: the two-level bootstrap's within-round interval is returned
    (labelled so), which compare reports with its no-run-noise warning. `resamples` and `seed`
    serve only that fallback.
    """
    b = _as_rounds(base_rounds, "base")
    h = _as_rounds(head_rounds, "head")
    pairs = min(len(b), len(h))
    if pairs < 2:
        return hierarchical_ratio(base_rounds, head_rounds, confidence, resamples, seed)
    d = np.log([np.median(h[i]) / np.median(b[i]) for i in range(pairs)])
    half = student_t_quantile(0.5 + confidence / 2.0, pairs - 1) * float(np.std(d, ddof=1)) / np.sqrt(pairs)
    mean = float(np.mean(d))
    return ABInterval(
        float(np.exp(mean)), float(np.exp(mean - half)), float(np.exp(mean + half)), confidence, "rounds-t", pairs
    )


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


def ratio_interval(
    base_rounds,
    head_rounds,
    *,
    method: str = "hierarchical",
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> ABInterval:
    """The interval of `method` (METHODS): one signature for the three, so callers name a method."""
    try:
        interval = INTERVALS[method]
    except KeyError:
        raise ValueError(f"unknown interval method {method!r}; known: {', '.join(METHODS)}") from None
    return interval(base_rounds, head_rounds, confidence, resamples, seed)


INTERVALS = {"rounds-t": rounds_t_ratio, "hierarchical": hierarchical_ratio, "pooled": pooled_ratio}


def verdict(interval: ABInterval, min_effect: float) -> str:
    """'regression' if low > 1 and ratio >= 1+min_effect; 'improvement' if high < 1 and
    ratio <= 1/(1+min_effect); else 'no change' (module doc: real and material)."""
    if interval.low > 1.0 and interval.ratio >= 1.0 + min_effect:
        return "regression"
    if interval.high < 1.0 and interval.ratio <= 1.0 / (1.0 + min_effect):
        return "improvement"
    return "no change"
