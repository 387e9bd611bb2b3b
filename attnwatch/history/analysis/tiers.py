"""What a verdict reads as: a sure change under the minimum effect is its own tier.

`history.analysis.ab.verdict` says "no change" whenever the point estimate is under the GPU's
min_effect, even when the interval excludes 1. That is the rule (min_effect keeps per-process
offsets from being verdicts), but a reader shown "no change" for +1.3% [+0.7%, +2.0%] is misled:
the slowdown is real, only smaller than what fails a check. So the displayed tier separates
the two kinds of "no change" (Lakens 2017, "Equivalence tests": a significant effect inside the
smallest effect of interest is neither a finding nor an absence of one):

* `regression` / `improvement`: the verdict, unchanged (real and at least min_effect);
* `slower, under threshold` / `faster, under threshold`: the interval excludes 1 on that side
  but the point estimate is under min_effect; it fails nothing;
* `no change`: the interval contains 1.

Only the verdict decides what fails a check or opens an alert; the tier is for reading. The PR
comment, the CLI table and the dashboard's Compare page all label rows with `tier` and `label`.
"""

from __future__ import annotations

SLOWER_UNDER = "slower, under threshold"
FASTER_UNDER = "faster, under threshold"
UNDER = (SLOWER_UNDER, FASTER_UNDER)


def tier(verdict: str, low: float | None, high: float | None) -> str:
    """The verdict, or an under-threshold tier when a 'no change' interval excludes 1."""
    if verdict != "no change" or low is None or high is None:
        return verdict
    if low > 1.0:
        return SLOWER_UNDER
    if high < 1.0:
        return FASTER_UNDER
    return verdict


def label(tier_: str, min_effect: float) -> str:
    """For people: 'slower, under the 2% threshold' (the threshold this verdict was judged by)."""
    if tier_ in UNDER:
        return f"{tier_.split(',')[0]}, under the {percent(min_effect)} threshold"
    return tier_


def percent(fraction: float) -> str:
    text = f"{fraction * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}%"
