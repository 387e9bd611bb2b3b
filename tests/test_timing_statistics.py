"""The statistics every stored latency goes through (history.analysis.statistics), on the recorded H200
samples: order statistics, the refusal of non-finite data, CV, and the bootstrap interval
(seeded, so reproducible) with a planted slowdown."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from attnwatch.history.analysis.statistics import bootstrap_median_ratio, coefficient_of_variation, summarize


@pytest.fixture(scope="module")
def samples(fixtures_dir):
    data = json.loads((fixtures_dir / "timing" / "h200_event_samples.json").read_text())["processes"]
    return {p: {k: v["us"][1:] for k, v in cases.items()} for p, cases in data.items()}


def test_summary_matches_order_statistics(samples):
    x = samples["process0"]["sdpa_flash/B4_H16_S1024_D64"]
    s = summarize(x)
    q = np.percentile(x, [10, 25, 50, 75, 90])
    assert s.n == len(x) == 299
    assert (s.p10_us, s.median_us, s.p90_us) == pytest.approx((q[0], q[2], q[4]))
    assert s.iqr_us == pytest.approx(q[3] - q[1]) and s.rel_spread == pytest.approx((q[3] - q[1]) / q[2])
    assert s.min_us <= s.p10_us <= s.median_us <= s.p90_us <= s.max_us
    assert s.stddev_us == pytest.approx(np.std(x, ddof=1))
    assert 68.0 < s.median_us < 70.0  # the recorded H200 figure: ~69 us


@pytest.mark.parametrize("bad", [[], [1.0, math.nan], [1.0, math.inf]])
def test_non_finite_or_empty_samples_are_refused(bad):
    with pytest.raises(ValueError):
        summarize(bad)


def test_cv_of_process_medians_is_small_for_large_cases(samples):
    medians = [summarize(samples[p]["torch_3op/B16_H16_S2048_D64"]).median_us for p in ("process0", "process1")]
    assert coefficient_of_variation(medians) < 0.001
    assert coefficient_of_variation([5.0]) == 0.0


def test_bootstrap_interval_is_reproducible_and_sees_a_planted_3pct_slowdown(samples):
    base = samples["process0"]["sdpa_cudnn/B4_H16_S1024_D64"]
    same = samples["process1"]["sdpa_cudnn/B4_H16_S1024_D64"]
    slow = [v * 1.03 for v in same]
    a = bootstrap_median_ratio(base, same, seed=1)
    assert a == bootstrap_median_ratio(base, same, seed=1)
    assert a.low <= a.ratio <= a.high and a.high - a.low < 0.02
    b = bootstrap_median_ratio(base, slow, seed=1)
    assert b.low > 1.01 and b.ratio == pytest.approx(a.ratio * 1.03, rel=1e-6)
