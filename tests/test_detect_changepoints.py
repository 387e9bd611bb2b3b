"""Change points on seeded series with planted steps (asv step_detect style), and the noise model."""

from __future__ import annotations

import numpy as np
import pytest

from attnwatch.history.analysis.changepoints import bic_penalty, detect_steps, robust_sigma, significant_steps


def _series(n: int, sigma: float, seed: int, steps: dict[int, float] | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = 100.0 * np.exp(rng.normal(0.0, sigma, n))
    for index, factor in (steps or {}).items():
        x[index:] *= factor
    return x


def test_robust_sigma_recovers_the_noise_and_ignores_a_step():
    rng = np.random.default_rng(3)
    noise = rng.normal(0.0, 0.01, 400)
    assert robust_sigma(noise) == pytest.approx(0.01, rel=0.15)
    stepped = noise.copy()
    stepped[200:] += 0.2  # a step 20 sigma high changes one difference only
    assert robust_sigma(stepped) == pytest.approx(robust_sigma(noise), rel=0.05)


def test_penalty_grows_with_noise_and_length():
    assert bic_penalty(0.01, 100) > bic_penalty(0.005, 100)
    assert bic_penalty(0.01, 1000) > bic_penalty(0.01, 100)
    assert bic_penalty(0.01, 100, scale=2.0) == pytest.approx(2 * 0.01**2 * np.log(100))


@pytest.mark.parametrize("seed", range(5))
def test_planted_regression_is_found_at_its_run(seed):
    x = _series(40, 0.004, seed, {25: 1.05})
    steps = significant_steps(x, min_effect=0.02, min_persist=3)
    assert [s.index for s in steps] == [25]
    assert steps[0].change == pytest.approx(0.05, abs=0.01)
    assert steps[0].points_after == 15


def test_regression_then_fix_gives_two_steps_in_opposite_directions():
    x = _series(60, 0.004, 11, {20: 1.08, 40: 1 / 1.08})
    steps = significant_steps(x, min_effect=0.02, min_persist=3)
    assert [s.index for s in steps] == [20, 40]
    assert steps[0].ratio > 1.05 and steps[1].ratio < 0.95


def test_a_step_below_min_effect_is_not_reported_even_if_real():
    x = _series(60, 0.001, 5, {30: 1.01})
    assert any(s.index == 30 for s in detect_steps(x, min_size=3))  # PELT sees it...
    assert significant_steps(x, min_effect=0.02, min_persist=3) == []  # ...but 1% < 2%


def test_a_step_at_the_very_end_waits_for_persistence():
    x = _series(30, 0.004, 2, {28: 1.10})  # only two runs after the step so far
    assert significant_steps(x, min_effect=0.02, min_persist=3) == []
    y = _series(31, 0.004, 2, {28: 1.10})  # the third run confirms it
    assert [s.index for s in significant_steps(y, min_effect=0.02, min_persist=3)] == [28]


def test_one_slow_run_is_not_a_step():
    x = _series(40, 0.004, 8)
    x[20] *= 1.3  # a throttled run
    assert significant_steps(x, min_effect=0.02, min_persist=3) == []


def test_false_alarms_on_pure_noise_are_rare():
    hits = sum(bool(significant_steps(_series(50, 0.004, seed), min_effect=0.02, min_persist=3)) for seed in range(200))
    assert hits <= 2  # <= 1% of 200 noise-only series


def test_flat_and_short_series():
    assert detect_steps([5.0] * 20) == []  # the sigma floor keeps the penalty above zero
    assert detect_steps([1.0, 2.0, 3.0]) == []
    with pytest.raises(ValueError, match="positive"):
        detect_steps([1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        detect_steps([1.0, float("nan")] * 5)


def test_kernel_cpd_linear_matches_pelt_l2():
    """The fast solver finds exactly what ruptures' reference PELT with the l2 cost finds."""
    import ruptures

    from attnwatch.history.analysis.changepoints import bic_penalty, robust_sigma

    for seed in range(20):
        x = np.log(_series(80, 0.004, seed, {30: 1.04, 60: 0.97}))
        pen = bic_penalty(max(robust_sigma(x), 5e-4), x.size)
        reference = ruptures.Pelt(model="l2", min_size=2, jump=1).fit(x.reshape(-1, 1)).predict(pen=pen)
        assert [s.index for s in detect_steps(np.exp(x), min_size=2)] == reference[:-1]
