"""A/B intervals and verdicts on the recorded H200 samples (two processes, 300 calls per case)."""

from __future__ import annotations

import numpy as np
import pytest

from compare_factory import fixture_processes
from attnwatch.history.analysis.ab import hierarchical_ratio, pooled_ratio, ratio_interval, verdict


@pytest.fixture(scope="module")
def procs(fixtures_dir):
    return fixture_processes(fixtures_dir)


def _rounds(samples, n=3, factor=1.0):
    chunk = len(samples) // n
    return [[s * factor for s in samples[i * chunk : (i + 1) * chunk]] for i in range(n)]


def test_two_processes_of_the_same_kernels_are_no_change(procs):
    """Same code, different processes: every case must be 'no change' at the H200's 2% threshold."""
    for case_id, base in procs["process0"].items():
        head = procs["process1"][case_id]
        for method in ("hierarchical", "pooled"):
            iv = ratio_interval(_rounds(base), _rounds(head), method=method, resamples=500)
            assert verdict(iv, 0.02) == "no change", (case_id, method, iv)


def test_the_interval_alone_would_false_alarm_which_is_why_min_effect_exists(procs):
    """The pooled interval excludes 1.0 for several no-change cases: process offsets are real."""
    excluding_one = 0
    for case_id, base in procs["process0"].items():
        iv = pooled_ratio(_rounds(base), _rounds(procs["process1"][case_id]), resamples=500)
        excluding_one += not (iv.low <= 1.0 <= iv.high)
    assert excluding_one >= 3


@pytest.mark.parametrize("factor, expected", [(1.05, "regression"), (1 / 1.05, "improvement")])
def test_a_five_percent_change_is_called(procs, factor, expected):
    for case_id, base in procs["process0"].items():
        head = procs["process1"][case_id]
        iv = hierarchical_ratio(_rounds(base), _rounds(head, factor=factor), resamples=500)
        assert verdict(iv, 0.02) == expected, (case_id, iv)
        assert iv.low < iv.ratio < iv.high


def test_hierarchical_interval_is_wider_when_rounds_disagree():
    rng = np.random.default_rng(0)
    base = [list(100 * (1 + off) * np.exp(rng.normal(0, 0.01, 200))) for off in (0.0, 0.01, -0.01)]
    head = [list(100 * (1 + off) * np.exp(rng.normal(0, 0.01, 200))) for off in (0.01, -0.01, 0.0)]
    h = hierarchical_ratio(base, head, resamples=1000)
    p = pooled_ratio(base, head, resamples=1000)
    assert (h.high - h.low) > 1.5 * (p.high - p.low)


def test_same_seed_same_interval_and_bad_input(procs):
    base = _rounds(procs["process0"]["torch_3op/b4_h16_s1k/fp16/noncausal"])
    a = hierarchical_ratio(base, base, resamples=300, seed=7)
    b = hierarchical_ratio(base, base, resamples=300, seed=7)
    assert a == b and a.ratio == 1.0
    with pytest.raises(ValueError, match="head"):
        hierarchical_ratio(base, [[]])
    with pytest.raises(ValueError, match="positive"):
        hierarchical_ratio(base, [[1.0, -2.0]])
    with pytest.raises(ValueError, match="unknown interval method"):
        ratio_interval(base, base, method="t-test")


def test_student_t_quantile_matches_scipy():
    from scipy import stats

    from attnwatch.history.analysis.statistics import student_t_cdf, student_t_quantile

    for df in (1, 2, 3, 4, 5, 6, 7, 30, 101):
        for p in (0.5, 0.9, 0.975, 1 - 0.05 / 12, 0.999, 0.9999):
            assert student_t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-10, abs=1e-12)
            assert student_t_quantile(1 - p, df) == pytest.approx(stats.t.ppf(1 - p, df), rel=1e-10, abs=1e-12)
        for t in (-40.0, -2.5, -0.1, 0.0, 0.7, 3.0, 12.0):
            assert student_t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-13)
    with pytest.raises(ValueError):
        student_t_quantile(1.0, 3)
    with pytest.raises(ValueError):
        student_t_cdf(1.0, 2.5)


def test_one_way_anova_matches_scipy_and_recovers_a_planted_group_effect():
    from scipy import stats

    from attnwatch.history.analysis.statistics import one_way_anova

    rng = np.random.default_rng(11)
    groups = [list(rng.normal(offset, 0.002, 4)) for offset in rng.normal(0, 0.005, 40)]
    result = one_way_anova(groups)
    f, p = stats.f_oneway(*groups)
    assert result.f == pytest.approx(f, rel=1e-9) and result.p_value() == pytest.approx(p, rel=1e-6)
    assert (result.df_between, result.df_within) == (39, 120)
    assert result.within_sd == pytest.approx(0.002, rel=0.2)
    assert result.between_sd == pytest.approx(0.005, rel=0.35)
    with pytest.raises(ValueError):
        one_way_anova([[1.0, 2.0]])


def test_rounds_t_pays_for_few_rounds_where_the_bootstrap_cannot():
    """Three rounds whose ratios disagree (-5.6%, -7.1%, -0.2%: a tuned configuration that flipped
    between rounds, as recorded on the H200): the two-level bootstrap cannot reach beyond the
    rounds' range and calls it an improvement; the paired t interval spans 1, so no verdict."""
    from attnwatch.history.analysis.ab import rounds_t_ratio

    rng = np.random.default_rng(3)
    base = [list(100 * np.exp(rng.normal(0, 0.01, 400))) for _ in range(3)]
    head = [[x * f for x in r] for r, f in zip(base, (0.9436, 0.9291, 0.9981))]
    boot = hierarchical_ratio(base, head, confidence=1 - 0.05 / 6, resamples=1000)
    t = rounds_t_ratio(base, head, confidence=1 - 0.05 / 6)
    assert verdict(boot, 0.02) == "improvement" and boot.high < 1
    assert verdict(t, 0.02) == "no change" and t.low < 1 < t.high and t.method == "rounds-t"
    assert t.ratio == pytest.approx(np.exp(np.mean(np.log([0.9436, 0.9291, 0.9981]))), rel=1e-3)


def test_rounds_t_with_one_round_is_the_within_round_interval():
    """No spread between rounds to estimate: the two-level interval, labelled so (compare warns)."""
    from attnwatch.history.analysis.ab import rounds_t_ratio

    iv = rounds_t_ratio([[10.0, 10.1, 9.9, 10.2]], [[10.5, 10.6, 10.4, 10.7]])
    assert iv.method == "hierarchical" and iv.rounds == 1 and iv.low > 1
