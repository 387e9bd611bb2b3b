"""A/B intervals and verdicts on the recorded H200 samples (two processes, 300 calls per case)."""

from __future__ import annotations

import numpy as np
import pytest

from compare_factory import fixture_processes
from history.detection.ab import hierarchical_ratio, pooled_ratio, ratio_interval, verdict


@pytest.fixture(scope="module")
def procs(fixtures_dir):
    return fixture_processes(fixtures_dir)


def _rounds(samples, n=3, factor=1.0):
    chunk = len(samples) // n
    return [[s * factor for s in samples[i * chunk:(i + 1) * chunk]] for i in range(n)]


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
