"""The two-level bootstrap in its batched form: exact against the one-case definition, and the
Compare page's verdicts on real H200 samples (tests/data/timing/h200_event_samples.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnwatch.app.data.compare import run_intervals, judge, shown_verdicts
from attnwatch.history.analysis.ab import hierarchical_intervals, hierarchical_ratio, verdict
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.analysis.statistics import resampled_medians

H200_SAMPLES = Path(__file__).resolve().parent / "data" / "timing" / "h200_event_samples.json"


@pytest.mark.parametrize("n", [7, 8, 300, 301])
def test_resampled_medians_equal_numpy_median_of_the_same_draw(n):
    rng = np.random.default_rng(n)
    ordered = np.sort(rng.lognormal(3.0, 0.2, size=(5, n)), axis=1)
    idx = rng.integers(0, n, size=(50, n))  # a draw with replacement from the (sorted) sample
    expected = np.median(ordered[:, idx], axis=2)
    got = resampled_medians(ordered, np.sort(idx, axis=1))
    np.testing.assert_allclose(got, expected, rtol=0, atol=0)


@pytest.fixture(scope="module")
def h200_samples():
    processes = json.loads(H200_SAMPLES.read_text())["processes"]
    p0, p1 = processes["process0"], processes["process1"]
    # First call of a process pays for warm-up effects the harness discards; drop it here too.
    return {case: (p0[case]["us"][1:], p1[case]["us"][1:]) for case in sorted(set(p0) & set(p1))}


def test_all_cases_at_once_equal_each_case_alone(h200_samples):
    """Batching is an implementation detail: every case's interval is the one it gets alone,
    with one round per side (the Compare page) and with unequal rounds (compare's unpaired form)."""
    base = {case: [a[:150], a[150:]] for case, (a, _) in h200_samples.items()}
    head = {case: [b[:100], b[100:200], b[200:]] for case, (_, b) in h200_samples.items()}
    for b_rounds, h_rounds in (
        (base, head),
        ({c: [a] for c, (a, _) in h200_samples.items()}, {c: [b] for c, (_, b) in h200_samples.items()}),
    ):
        together = hierarchical_intervals(b_rounds, h_rounds, resamples=500, seed=3)
        assert set(together) == set(h200_samples)
        for case in h200_samples:
            assert together[case] == hierarchical_ratio(b_rounds[case], h_rounds[case], resamples=500, seed=3), case


def test_planted_slowdown_on_real_noise_gets_ci_verdicts(h200_samples):
    h200 = load_thresholds("NVIDIA H200")
    base = {case: a for case, (a, _) in h200_samples.items()}
    slower = {case: list(np.asarray(a) * 1.05) for case, a in base.items()}
    same = run_intervals(base, base, confidence=h200.confidence)
    regressed = run_intervals(base, slower, confidence=h200.confidence)
    assert {verdict(iv, h200.min_effect) for iv in same.values()} == {"no change"}
    assert {verdict(iv, h200.min_effect) for iv in regressed.values()} == {"regression"}
    assert {iv.method for iv in regressed.values()} == {"hierarchical"}


def test_a_sure_slowdown_under_min_effect_reads_as_its_own_tier(h200_samples):
    """+1.2% on every case: the interval excludes 1, the point is under the H200's 2%, so the
    verdict stays 'no change' (it fails nothing) and the page shows 'slower, under the 2% threshold'."""
    h200 = load_thresholds("NVIDIA H200")
    base = {case: np.asarray(a) for case, (a, _) in h200_samples.items()}
    head = {case: a * 1.012 for case, a in base.items()}
    pair = pd.DataFrame(
        {
            "case_id": list(base),
            "base_status": "ok",
            "head_status": "ok",
            "ratio": [1.012] * len(base),
            "base_correct": True,
            "head_correct": True,
        }
    )
    for column in (
        "base_us",
        "head_us",
        *(
            f"{s}_{c}"
            for s in ("base", "head")
            for c in ("converged", "rel_spread", "throttled_samples", "n_samples", "graph_median_us", "timing_mode")
        ),
    ):
        pair[column] = None
    judged = judge(pair, base, head, "NVIDIA H200")
    assert set(judged["verdict"]) == {"no change"}
    shown = shown_verdicts(judged, h200.min_effect)
    assert set(shown["shown"]) == {"slower, under the 2% threshold"}
