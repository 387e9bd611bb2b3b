"""Sequential sampling (ci/compare/sequential.py, ci/compare/measure.py): a case stops as soon as
its repeated interval is decided, undecided ones continue to the cap, and the levels are the
Bonferroni split. The sides here replay seeded synthetic rounds in place of GPU workers, so the
stopping rule is tested on known truths; tests/test_compare_workers.py runs it with real ones."""

from __future__ import annotations

import numpy as np
import pytest

from attnwatch.ci.compare.measure import measure_rounds
from attnwatch.ci.compare.rounds import CaseRound
from attnwatch.ci.compare.sequential import SequentialDesign, decide, final_verdict
from attnwatch.ci.plan import plan_cases
from attnwatch.history.analysis.ab import ABInterval
from attnwatch.kernels.shapes import SHAPES

MIN_EFFECT = 0.02


class ReplaySide:
    """A side whose rounds are drawn from N(true median, noise): per-round offset, then samples."""

    def __init__(self, name: str, truths: dict[str, tuple[float, float]], seed: int) -> None:
        self.name, self.truths = name, truths
        self.rng = np.random.default_rng(seed)
        self.environment, self.commit_sha = {"gpu_name": "NVIDIA H200"}, name * 40
        self.asked: list[list[str]] = []

    def start(self) -> None:
        pass

    def ready(self) -> None:
        pass

    def measure(self, cases, round_index, sampling):
        self.asked.append([c.case_id for c in cases])
        out = {}
        for c in cases:
            median, round_sd = self.truths[c.variant]
            level = median * np.exp(self.rng.normal(0.0, round_sd))
            samples = level * np.exp(self.rng.normal(0.0, 0.01, size=200))
            out[c.case_id] = CaseRound(
                c.case_id, c.variant, c.shape_id, c.dtype, c.causal, "ok", samples_us=samples.tolist()
            )
        return out


def _run(head_truths: dict[str, tuple[float, float]], design: SequentialDesign, seed: int = 1):
    base_truths = {v: (100.0, sd) for v, (_, sd) in head_truths.items()}
    cases = plan_cases(list(head_truths), [SHAPES["h100_small"]], ["fp16"], [False])
    sides = {"base": ReplaySide("base", base_truths, seed), "head": ReplaySide("head", head_truths, seed + 1)}
    measured = measure_rounds(
        cases, sides, design, min_effect=MIN_EFFECT, sampling={}, method="rounds-t", resamples=1000, log=lambda m: None
    )
    by_variant = {cid.split("/")[0]: cid for cid in measured.rounds_used}
    return measured, sides, by_variant


def test_decided_cases_stop_at_the_first_look_and_undecided_ones_run_to_the_cap():
    design = SequentialDesign(3, 8, 0.95)
    measured, sides, ids = _run(
        {
            "same": (100.0, 0.002),  # no change, low noise: inside ±2% at once
            "slow": (110.0, 0.002),  # 10% slower: above +2% at once
            "fast": (90.0, 0.002),  # 10% faster: an improvement
            "edge": (101.7, 0.004),  # +1.7% under the H200's 0.4% round noise: neither inside ±2% nor beyond it
        },
        design,
    )
    assert measured.decided == {ids["same"]: "no change", ids["slow"]: "regression", ids["fast"]: "improvement"}
    assert measured.rounds_used[ids["same"]] == measured.rounds_used[ids["slow"]] == 3
    assert measured.rounds_used[ids["edge"]] == 8 and ids["edge"] not in measured.decided
    # decided cases are not asked for again; both sides are asked for the same cases each round
    assert sides["base"].asked == sides["head"].asked
    assert [len(a) for a in sides["base"].asked] == [4, 4, 4, 1, 1, 1, 1, 1]
    assert len(measured.base) == len(measured.head) == 8
    assert [s for s, _, _ in measured.schedule[:4]] == ["base", "head", "head", "base"]


def test_a_fixed_design_is_one_look_at_the_nominal_level():
    design = SequentialDesign(5, 5, 0.95)
    assert design.looks == [5] and design.per_look_confidence == pytest.approx(0.95)
    measured, sides, ids = _run({"same": (100.0, 0.002), "slow": (110.0, 0.002)}, design)
    assert set(measured.rounds_used.values()) == {5}
    assert [len(a) for a in sides["base"].asked] == [2] * 5


def test_bonferroni_split_over_the_looks():
    design = SequentialDesign(3, 8, 0.95)
    assert design.looks == [3, 4, 5, 6, 7, 8]
    assert design.per_look_confidence == pytest.approx(1 - 0.05 / 6)
    assert "6 looks at 99.17% each" in design.describe()
    with pytest.raises(ValueError):
        SequentialDesign(4, 3, 0.95)


@pytest.mark.parametrize(
    "ratio, low, high, expected",
    [
        (1.04, 1.025, 1.06, "regression"),
        (1.025, 1.005, 1.045, "regression"),  # surely slower and by more than 2%, though the interval reaches below +2%
        (0.94, 0.90, 0.975, "improvement"),
        (0.975, 0.96, 0.995, "improvement"),
        (1.0, 0.985, 1.015, "no change"),  # inside ±2%: equivalence
        (1.015, 1.005, 1.03, None),  # surely slower, by less than 2% so far, not surely under it
        (1.03, 0.99, 1.07, None),  # beyond +2%, but the rounds' noise could explain it
        (0.99, 0.97, 1.01, None),  # straddles -2%
        (1.0, 0.95, 1.05, None),  # too wide to say anything
    ],
)
def test_decide(ratio, low, high, expected):
    iv = ABInterval(ratio, low, high, 0.99, "hierarchical", 3)
    assert decide(iv, MIN_EFFECT) == expected
    if expected is None:
        assert final_verdict(iv, MIN_EFFECT) == "no change"  # at the cap: the ordinary rule
    else:
        assert final_verdict(iv, MIN_EFFECT) == expected


def test_sequential_false_alarms_stay_under_alpha_on_noise_with_round_offsets():
    """A/A with a real between-round offset (0.4%, the H200's): over 60 cases no verdict but
    'no change'; the simultaneous level is 95%, so more than a few would be a broken split."""
    design = SequentialDesign(3, 8, 0.95)
    truths = {f"v{i}": (100.0, 0.004) for i in range(60)}
    measured, _, _ = _run(truths, design, seed=7)
    assert not [cid for cid, v in measured.decided.items() if v != "no change"]
