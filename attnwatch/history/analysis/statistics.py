"""Summary statistics and resampling intervals for latency samples (pure functions).

Used by the harness (summaries stored with every result), by `compare` (A/B intervals) and
by detection. All functions take plain sequences of floats and return plain floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np


@dataclass(kw_only=True)
class Summary:
    """Robust summary of one case's per-call latencies (microseconds).

    The one definition of a case's latency statistics: the bundle's CaseTiming extends it
    (history.contract.bundle), so what is stored is what `summarize` computes; a change here changes
    that format (and its schema version).
    """

    n: int
    median_us: float
    p10_us: float
    p90_us: float
    iqr_us: float
    mean_us: float
    stddev_us: float
    min_us: float
    max_us: float
    rel_spread: float  # IQR / median: the dispersion measure the adaptive sampler drives down


def summarize(samples_us: Sequence[float]) -> Summary:
    """Order statistics with linear interpolation (numpy's default, Hyndman & Fan type 7).

    Cost: one sort, O(n log n). Raises ValueError on an empty or non-finite sample, since a
    summary of such data would be a number nobody can trust.
    """
    x = np.asarray(samples_us, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples to summarize")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples contain NaN or Inf")
    p10, q1, med, q3, p90 = np.percentile(x, [10, 25, 50, 75, 90])
    return Summary(
        n=int(x.size),
        median_us=float(med),
        p10_us=float(p10),
        p90_us=float(p90),
        iqr_us=float(q3 - q1),
        mean_us=float(x.mean()),
        stddev_us=float(x.std(ddof=1)) if x.size > 1 else 0.0,
        min_us=float(x.min()),
        max_us=float(x.max()),
        rel_spread=float(q3 - q1) / float(med) if med > 0 else math.inf,
    )


def median(values: Sequence[float]) -> float:
    """The median: for an even count, the mean of the two middle order statistics.

    The one median of the project: the `median_us` that `summarize` stores (Hyndman & Fan
    type 7 at p = 0.5; numpy's and `statistics.median`'s definition, and the one the vectorised
    bootstraps use: `resampled_medians`, history.analysis.ab). Where a median decides
    something (the graph-replay threshold in ci/engine/group.py, a compare round's median in
    ci/compare/analysis.py) it is this one, so the decision rests on the number stored beside
    it. Why not the lower or upper median: either is one order statistic, off this one by half
    the gap between the middle two, and the sampler takes whole blocks of `block_calls` (10 on
    a GPU), so its counts are even and the two would differ for every GPU case. Raises
    ValueError on no values.
    """
    x = sorted(float(v) for v in values)
    if not x:
        raise ValueError("no values to take the median of")
    mid = len(x) // 2
    return x[mid] if len(x) % 2 else (x[mid - 1] + x[mid]) / 2.0


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation over mean (ddof=1); 0 for fewer than two values."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2 or x.mean() == 0:
        return 0.0
    return float(x.std(ddof=1) / x.mean())


@dataclass(frozen=True)
class RatioInterval:
    ratio: float  # median(head) / median(base)
    low: float
    high: float
    confidence: float


def bootstrap_median_ratio(
    base_us: Sequence[float] | np.ndarray,
    head_us: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> RatioInterval:
    """Percentile-bootstrap interval for median(head)/median(base).

    Method: Efron & Tibshirani (1993), "An Introduction to the Bootstrap", ch. 13: resample
    each group independently with replacement, take the ratio of medians per resample, and
    read the (1-c)/2 and (1+c)/2 percentiles. Cost: O(resamples * (n_base + n_head)) with
    vectorised numpy. A fixed seed makes verdicts reproducible run to run.
    """
    base = np.asarray(base_us, dtype=np.float64)
    head = np.asarray(head_us, dtype=np.float64)
    if base.size == 0 or head.size == 0:
        raise ValueError("bootstrap needs samples on both sides")
    rng = np.random.default_rng(seed)
    b = np.median(base[rng.integers(0, base.size, size=(resamples, base.size))], axis=1)
    h = np.median(head[rng.integers(0, head.size, size=(resamples, head.size))], axis=1)
    ratios = h / b
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return RatioInterval(
        ratio=float(np.median(head) / np.median(base)),
        low=float(low),
        high=float(high),
        confidence=confidence,
    )


def resampled_medians(sorted_values: np.ndarray, sorted_indices: np.ndarray) -> np.ndarray:
    """Medians of bootstrap resamples of many samples at once, without sorting any values.

    `sorted_values` (cases, n): each case's samples in ascending order. `sorted_indices`
    (resamples, n): each row a resample's indices (drawn with replacement), sorted ascending.
    Because the values are sorted, the k-th smallest value of a resample is
    sorted_values[sorted_index[k]], so a resample's median is read at the middle rank(s):
    O(resamples * n log n) once for the indices, then a gather of (cases, resamples).
    Identical to np.median(sorted_values[:, idx]) for the same draw; resampling the sorted
    sample is the same bootstrap as resampling it in any order. Returns (cases, resamples).
    """
    n = sorted_values.shape[1]
    mid = n // 2
    if n % 2:
        return sorted_values[:, sorted_indices[:, mid]]
    return (sorted_values[:, sorted_indices[:, mid - 1]] + sorted_values[:, sorted_indices[:, mid]]) / 2.0


def student_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with an integer `df` >= 1, exactly, by the finite series of
    Abramowitz & Stegun 26.7.3-26.7.4 in theta = atan(t / sqrt(df)): A = P(|T| <= |t|) is
    (2/pi)(theta + sin theta (cos theta + 2/3 cos^3 theta + ...)) for odd df and
    sin theta (1 + 1/2 cos^2 theta + 3/8 cos^4 theta + ...) for even df, df/2 terms at most."""
    if df < 1 or int(df) != df:
        raise ValueError(f"need an integer df >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:
        series, term = 0.0, math.cos(theta)
        for k in range(1, (df - 1) // 2 + 1):  # cos, 2/3 cos^3, 2*4/(3*5) cos^5, ...
            series += term
            term *= c2 * (2 * k) / (2 * k + 1)
        inside = (2 / math.pi) * (theta + s * series)
    else:
        series, term = 0.0, 1.0
        for k in range(1, df // 2 + 1):  # 1, 1/2 cos^2, 1*3/(2*4) cos^4, ...
            series += term
            term *= c2 * (2 * k - 1) / (2 * k)
        inside = s * series
    return 0.5 + math.copysign(inside / 2, t)


@lru_cache(maxsize=256)
def student_t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with an integer `df` >= 1, without scipy (the GPU runners'
    Python has none): bisection to double precision on the exact CDF (`student_t_cdf`).
    Microseconds a call, so a compare's looks do not wait on it."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"need 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(100):
        mid = (low + high) / 2
        if mid in (low, high):
            break
        low, high = (mid, high) if student_t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


@dataclass(frozen=True)
class OneWayAnova:
    """Fisher's one-way analysis of variance of groups of values (e.g. per-round log medians
    grouped by process or by buffer): the between- and within-group mean squares, F = MSB/MSW
    with (k-1, n-k) degrees of freedom, and the between-group standard deviation of the
    random-effects model by the method of moments, sqrt(max(0, (MSB - MSW) / n0)) with n0 the
    mean group size (Searle, Casella & McCulloch, "Variance Components", 1992, ch. 3)."""

    f: float
    df_between: int
    df_within: int
    ms_between: float
    ms_within: float
    between_sd: float
    within_sd: float

    def p_value(self) -> float | None:
        """P(F' >= F) under no group effect; None where scipy is not installed (the GPU runners)."""
        try:
            from scipy import stats
        except ImportError:
            return None
        return float(stats.f.sf(self.f, self.df_between, self.df_within))


def one_way_anova(groups: Sequence[Sequence[float]]) -> OneWayAnova:
    """OneWayAnova of at least two groups, each of at least one value, with n > k."""
    k, n = len(groups), sum(len(g) for g in groups)
    if k < 2 or n <= k:
        raise ValueError(f"one_way_anova: need >= 2 groups and more values than groups, got {k} and {n}")
    grand = sum(sum(g) for g in groups) / n
    means = [sum(g) / len(g) for g in groups]
    msb = sum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means)) / (k - 1)
    msw = sum(sum((x - m) ** 2 for x in g) for g, m in zip(groups, means)) / (n - k)
    f = msb / msw if msw > 0 else math.inf
    return OneWayAnova(
        f=f,
        df_between=k - 1,
        df_within=n - k,
        ms_between=msb,
        ms_within=msw,
        between_sd=math.sqrt(max(0.0, (msb - msw) / (n / k))),
        within_sd=math.sqrt(msw),
    )
