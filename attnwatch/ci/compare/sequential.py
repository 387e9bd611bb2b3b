"""Sequential sampling for A/B: stop a case as soon as its verdict is decided.

Method: repeated confidence intervals (Jennison & Turnbull 1989, "Interim analyses: the
repeated confidence interval approach", JRSS B 51:305-361; Jennison & Turnbull 2000, "Group
Sequential Methods with Applications to Clinical Trials", ch. 9). Rounds are measured in
groups (one base and one head round, ABBA order); after each round from `min_rounds` to
`max_rounds` every undecided case gets the interval of head/base (paired t over rounds by
default; history.analysis.ab.ratio_interval, the same estimator as a fixed-size compare) at the
per-look level `1 - alpha/K`, K = the number of looks. The case stops at the first look where

* the verdict rule of history.analysis.ab says regression or improvement (the interval on
  one side of 1 and the point estimate beyond ±min_effect);
* the interval lies entirely inside (1/(1 + min_effect), 1 + min_effect): no change, decided
  (an equivalence decision in the sense of Schuirmann's two one-sided tests, 1987);

otherwise it is measured again, up to `max_rounds`, where the last interval is judged by the
same rule and the case is reported as undecided at the cap when it was neither.

Error rates. Looking K times at a 1 - alpha interval would let a case "escape" at any look
and inflate the error rate (with K = 6 looks at 95%, a no-change case's chance that some look
lies entirely outside its truth is several times 5%). Splitting alpha evenly over the K
looks (Bonferroni; the simplest alpha-spending function, Lan & DeMets 1983) makes the K
intervals simultaneous: with probability at least 1 - alpha every look covers the true ratio,
whatever the stopping rule: a case that is not slower at all is called a regression with
probability at most alpha/2 (its interval would have to lie above 1), and "no change" is decided
for a case whose truth lies beyond ±min_effect with probability at most alpha. A case truly slower
by a little less than min_effect can still be called a regression when its point estimate lands
beyond the threshold (near the threshold about half the time): that is what a threshold on the
estimate means. The price of the split is a wider interval at each look (99.2% instead of 95%
for K = 6). These guarantees are only as good as the interval's own coverage: the paired t
interval's rests on roughly normal per-round log ratios, the two-level bootstrap's is well
below nominal with few rounds, and neither can see an offset a worker process keeps for its
whole life (history.analysis.ab; the stream's, now renewed every round); the power and false-alarm rates on
recorded H200 noise are measured, not assumed (scripts/detection_power.py --sequential,
docs/benchmarks/detection.md "Detection quality").

Cost: one interval per undecided case per look (history.analysis.ab: the t interval reads R
medians; a bootstrap is O(resamples x samples)).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnwatch.history.analysis.ab import ABInterval, verdict

DECIDED = ("regression", "improvement", "no change")


@dataclass(frozen=True)
class SequentialDesign:
    """Looks after every round from `min_rounds` to `max_rounds`; family-wise `confidence`."""

    min_rounds: int
    max_rounds: int
    confidence: float

    def __post_init__(self) -> None:
        if not 1 <= self.min_rounds <= self.max_rounds:
            raise ValueError(f"need 1 <= min_rounds <= max_rounds, got {self.min_rounds}, {self.max_rounds}")
        if not 0.5 <= self.confidence < 1.0:
            raise ValueError(f"confidence must be in [0.5, 1), got {self.confidence}")

    @property
    def looks(self) -> list[int]:
        """Round counts at which undecided cases are judged."""
        return list(range(self.min_rounds, self.max_rounds + 1))

    @property
    def per_look_confidence(self) -> float:
        """1 - alpha/K: the Bonferroni split of alpha over the K looks (1 look: the nominal level)."""
        return 1.0 - (1.0 - self.confidence) / len(self.looks)

    def is_look(self, rounds_done: int) -> bool:
        return self.min_rounds <= rounds_done <= self.max_rounds

    def describe(self) -> str:
        if len(self.looks) == 1:
            return f"{self.max_rounds} rounds per case, one look at {self.confidence:.0%}"
        return (
            f"sequential: {self.min_rounds} to {self.max_rounds} rounds per case, {len(self.looks)} looks at "
            f"{self.per_look_confidence:.2%} each (Bonferroni: {self.confidence:.0%} simultaneous)"
        )


def decide(interval: ABInterval, min_effect: float) -> str | None:
    """The decided verdict of an interval at a look, or None while more rounds could change it."""
    found = verdict(interval, min_effect)
    if found != "no change":
        return found
    if interval.low > 1.0 / (1.0 + min_effect) and interval.high < 1.0 + min_effect:
        return "no change"
    return None


def final_verdict(interval: ABInterval, min_effect: float) -> str:
    """At the cap: the ordinary rule (an undecided interval is 'no change')."""
    return verdict(interval, min_effect)
