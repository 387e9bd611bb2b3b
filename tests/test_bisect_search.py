"""ci/bisect/search.py with fake oracles: how many revisions it measures, and that an oracle
that cannot decide gets an honest range, never a guess."""

from __future__ import annotations

import math

import pytest

from attnwatch.ci.bisect.search import Judgement, bisect

COMMITS = [f"{i:02d}" + "0" * 38 for i in range(17)]  # the good revision, then 16 commits


def step_oracle(culprit: int, calls: list, undecided: dict[int, int] | None = None):
    """Slow from `culprit` on; `undecided[i]`: how many first attempts at commit i cannot decide."""
    undecided = dict(undecided or {})

    def oracle(sha: str, attempt: int) -> Judgement:
        index = COMMITS.index(sha)
        calls.append((index, attempt))
        if undecided.get(index, 0) > attempt:
            return Judgement("undecided", f"interval of {sha[:2]} straddles the threshold")
        return Judgement("slow" if index >= culprit else "same", f"commit {index}")

    return oracle


@pytest.mark.parametrize("culprit", range(1, 17))
def test_a_step_in_16_commits_is_found_in_at_most_5_measured_revisions(culprit):
    calls: list = []
    result = bisect(COMMITS, step_oracle(culprit, calls))
    assert result.outcome == "found" and result.culprit == COMMITS[culprit]
    assert result.revisions_measured == len(calls) <= 1 + math.ceil(math.log2(16)) == 5
    assert calls[0] == (16, 0)  # the bad revision first: the slowdown must reproduce in this job
    assert result.commits[result.good_index] == COMMITS[culprit - 1]  # its predecessor was measured not slow ...
    assert result.last_judgement(culprit).state == "slow"  # ... and the culprit itself slow
    assert (culprit - 1 == 0) or result.last_judgement(culprit - 1).state == "same"


def test_an_undecided_commit_is_measured_again_once_and_then_decides():
    calls: list = []
    result = bisect(COMMITS, step_oracle(5, calls, undecided={8: 1}))
    assert result.outcome == "found" and result.culprit == COMMITS[5]
    assert (8, 0) in calls and (8, 1) in calls  # the re-measure (the runner doubles its rounds)
    assert result.revisions_measured == len(calls) - 1


def test_a_commit_that_stays_undecided_stops_the_search_with_the_range_it_proved():
    calls: list = []
    result = bisect(COMMITS, step_oracle(5, calls, undecided={4: 2}))
    assert result.outcome == "undecided" and result.culprit is None
    # 16 (slow), 8 (slow), 4 (undecided twice): culprit in (0, 8], and nothing more is claimed
    assert calls == [(16, 0), (8, 0), (4, 0), (4, 1)]
    assert (result.good_index, result.bad_index) == (0, 8)
    assert COMMITS[4][:12] in result.why and "straddles" in result.why


def test_a_bad_revision_that_is_not_slower_blames_nobody():
    calls: list = []
    result = bisect(COMMITS, step_oracle(99, calls))
    assert result.outcome == "not reproduced" and result.culprit is None and calls == [(16, 0)]
    result = bisect(COMMITS, step_oracle(3, [], undecided={16: 5}))
    assert result.outcome == "undecided" and result.culprit is None and len(result.probes) == 2


def test_one_commit_after_the_good_one_is_confirmed_by_one_measurement():
    calls: list = []
    result = bisect(COMMITS[:2], step_oracle(1, calls))
    assert result.outcome == "found" and result.culprit == COMMITS[1] and calls == [(1, 0)]
    with pytest.raises(ValueError):
        bisect(COMMITS[:1], step_oracle(1, calls))


def _compared(ratio: float, low: float, high: float, min_effect: float | None = None):
    from attnwatch.ci.compare.report import CaseComparison, SideResult

    side = SideResult("ok", 100.0)
    return CaseComparison(
        "v/s/fp16/causal", "v", "s", "fp16", True, "no change", side, side, ratio, low, high, min_effect=min_effect
    )


@pytest.mark.parametrize(
    "interval, own_effect, state",
    [
        ((0.914, 0.560, 1.492), None, "same"),  # noisy, but surely below +50%: a CPU run's second attempt
        ((1.089, 0.771, 1.538), None, "undecided"),  # reaches past +50%: could carry the step
        ((1.089, 0.771, 1.538), 0.6, "same"),  # the case's own min_effect is the bar
        ((1.0, 0.99, 1.01), 0.01, "undecided"),  # at the bar, not below it
    ],
)
def test_a_candidate_surely_below_the_step_is_same_however_far_below_its_interval_reaches(interval, own_effect, state):
    """The oracle's one-sided question (ci/bisect/oracle.py): undecided by the compare, a
    candidate whose upper end is below 1 + min_effect does not carry the step."""
    from attnwatch.ci.bisect.oracle import judge

    case = _compared(*interval, min_effect=own_effect)
    found, why = judge([case], {}, {case.case_id}, 0.5)
    assert found == state, why
    assert judge([case], {case.case_id: "regression"}, {case.case_id}, 0.5)[0] == "slow"
    assert judge([case], {}, set(), 0.5)[0] == "undecided"  # not tracked: nothing measured
