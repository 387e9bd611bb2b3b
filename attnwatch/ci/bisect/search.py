"""The search of a bisect: the first slow commit of an ordered list, given a verdict oracle.

Input: commits oldest first, `commits[0]` the good revision and `commits[-1]` the bad one,
and an oracle that measures one commit against the good revision (ci/bisect/oracle.py: one
same-job compare) and answers `slow` (a regression against the good revision), `same` (not
slower: decided no change, or faster) or `undecided` (the interval decides neither).

The search (Knuth, TAOCP vol. 3, 6.2.1, binary search on a monotone predicate, as `git
bisect` does on a linear history):

1. The bad revision is measured first: the slowdown must reproduce in this job before any
   commit is blamed for it. Not slow: the search stops ("not reproduced" or "undecided").
2. Invariant: `commits[lo]` is known not slow, `commits[hi]` known slow; the midpoint is
   measured and one side dropped, until they are adjacent: `commits[hi]` is the culprit, and
   it was measured (so its interval can be printed). With n commits after the good one this
   takes 1 + ceil(log2 n) measured revisions (16 commits: 5).
3. Honesty over guessing: an `undecided` answer is measured once more (`attempt` 1: the
   runner doubles the round cap); still undecided, the search stops and reports the narrowest
   range it has proved, `commits[lo]` (not slow) to `commits[hi]` (slow), with the undecided
   commit and why. It never assumes a side for a commit it could not judge.

Assumes one step: every commit after the culprit stays slow. A history that recovered and
regressed again gives *a* commit where the predicate flips, like `git bisect`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

STATES = ("slow", "same", "undecided")


@dataclass(frozen=True)
class Judgement:
    """The oracle's answer for one commit: its state, a one-line reason, what it measured."""

    state: str
    why: str = ""
    data: Any = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"judgement state: expected one of {STATES}, got {self.state!r}")


@dataclass(frozen=True)
class Probe:
    """One measurement: the commit's index in the list, the attempt (0, or 1 for the re-measure)."""

    index: int
    sha: str
    attempt: int
    judgement: Judgement


@dataclass
class SearchResult:
    """`found`: `culprit` is the first slow commit. `undecided`: it lies in (good_index,
    bad_index] and `why` says what stopped the search. `not reproduced`: the bad revision was
    measured not slower than the good one."""

    outcome: str
    good_index: int  # the latest commit known not slow
    bad_index: int  # the earliest commit known slow (for "not reproduced": the bad revision)
    commits: list[str]
    probes: list[Probe] = field(default_factory=list)
    why: str = ""

    @property
    def culprit(self) -> str | None:
        return self.commits[self.bad_index] if self.outcome == "found" else None

    @property
    def revisions_measured(self) -> int:
        """Distinct revisions measured (the good one is measured in every compare and not counted)."""
        return len({p.sha for p in self.probes})

    def last_judgement(self, index: int) -> Judgement | None:
        return next((p.judgement for p in reversed(self.probes) if p.index == index), None)


Oracle = Callable[[str, int], Judgement]


def bisect(commits: Sequence[str], oracle: Oracle, *, retries: int = 1) -> SearchResult:
    """Search `commits` (good first, bad last; at least two) with `oracle(sha, attempt)`."""
    commits = list(commits)
    if len(commits) < 2:
        raise ValueError("bisect needs the good and the bad revision (at least two commits)")
    result = SearchResult("found", 0, len(commits) - 1, commits)

    def judge(index: int) -> Judgement:
        for attempt in range(retries + 1):
            judgement = oracle(commits[index], attempt)
            result.probes.append(Probe(index, commits[index], attempt, judgement))
            if judgement.state != "undecided":
                break
        return judgement

    first = judge(result.bad_index)
    if first.state != "slow":
        result.outcome = "not reproduced" if first.state == "same" else "undecided"
        result.why = f"the bad revision {commits[-1][:12]} is not measured slower than the good one: {first.why}"
        return result
    lo, hi = 0, len(commits) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        judgement = judge(mid)
        if judgement.state == "slow":
            hi = mid
        elif judgement.state == "same":
            lo = mid
        else:
            result.outcome = "undecided"
            result.why = f"{commits[mid][:12]} stayed undecided after {retries + 1} measurement(s): {judgement.why}"
            break
    result.good_index, result.bad_index = lo, hi
    return result
