"""The Compare page's batched bootstrap: exact against the one-at-a-time definition, and in
agreement with CI's interval on real H200 samples (tests/data/timing/h200_event_samples.json)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.data.compare import batched_median_ratio_intervals, resampled_medians
from history.detection.ab import verdict
from history.detection.thresholds import load_thresholds
from history.statistics import bootstrap_median_ratio


@pytest.mark.parametrize("n", [7, 8, 300, 301])
def test_resampled_medians_equal_numpy_median_of_the_same_draw(n):
    rng = np.random.default_rng(n)
    ordered = np.sort(rng.lognormal(3.0, 0.2, size=(5, n)), axis=1)
    idx = rng.integers(0, n, size=(50, n))  # a draw with replacement from the (sorted) sample
    expected = np.median(ordered[:, idx], axis=2)
    got = resampled_medians(ordered, np.sort(idx, axis=1))
    np.testing.assert_allclose(got, expected, rtol=0, atol=0)


@pytest.fixture(scope="module")
def h200_samples(fixtures_dir):
    processes = json.loads((fixtures_dir / "timing" / "h200_event_samples.json").read_text())["processes"]
    p0, p1 = processes["process0"], processes["process1"]
    # First call of a process pays for warm-up effects the harness discards; drop it here too.
    return {case: (p0[case]["us"][1:], p1[case]["us"][1:]) for case in sorted(set(p0) & set(p1))}


def test_intervals_agree_with_ci_bootstrap_on_real_h200_noise(h200_samples):
    base = {case: a for case, (a, _) in h200_samples.items()}
    head = {case: b for case, (_, b) in h200_samples.items()}
    batched = batched_median_ratio_intervals(base, head, confidence=0.95)
    assert set(batched) == set(h200_samples)
    for case, (a, b) in h200_samples.items():
        ci = bootstrap_median_ratio(a, b, confidence=0.95, resamples=2000, seed=0)
        mine = batched[case]
        assert mine.ratio == pytest.approx(ci.ratio, rel=1e-12)
        # Different random draws: the ends agree within Monte Carlo error (well under 0.5%).
        assert mine.low == pytest.approx(ci.low, abs=0.004), case
        assert mine.high == pytest.approx(ci.high, abs=0.004), case


def test_planted_slowdown_on_real_noise_gets_ci_verdicts(h200_samples):
    h200 = load_thresholds("NVIDIA H200")
    base = {case: a for case, (a, _) in h200_samples.items()}
    slower = {case: list(np.asarray(a) * 1.05) for case, a in base.items()}
    same = batched_median_ratio_intervals(base, base, confidence=h200.confidence)
    regressed = batched_median_ratio_intervals(base, slower, confidence=h200.confidence)
    assert {verdict(iv, h200.min_effect) for iv in same.values()} == {"no change"}
    assert {verdict(iv, h200.min_effect) for iv in regressed.values()} == {"regression"}
