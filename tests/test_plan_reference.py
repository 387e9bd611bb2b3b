"""The gaps' baseline is the operator's, declared once (kernels/operators.py), and must be a
registered variant of that operator (kernels/registry.py).

The plan puts it first in every interleave group and names it, so the measuring child takes
every gap against it; changing the operator's baseline moves all of that, with no second
declaration to update.
"""

from __future__ import annotations

import dataclasses

import pytest

from attnwatch.ci.plan import RunPlan, plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.ci.timing.derived import apply_gaps, case_timing
from attnwatch.ci.timing.sampler import RawMeasurement
from attnwatch.kernels import operators, registry
from attnwatch.kernels.shapes import SHAPES


def _timing(case, median: float):
    raw = RawMeasurement(key=case.case_id, timing_mode="cpu_wall", samples_us=[median * 0.99, median, median * 1.01])
    return case_timing(case, raw, case.group)


def _attention_with(monkeypatch, **changes) -> None:
    monkeypatch.setitem(operators._OPERATORS, "attention", dataclasses.replace(operators.ATTENTION, **changes))


def test_the_plan_follows_the_operator_s_baseline(tmp_path, monkeypatch):
    cases = plan_cases(["torch_3op", "sdpa_flash", "sdpa"], [SHAPES["cpu_tiny"]], ["fp16"], [False])
    assert [c.variant for c in cases] == ["sdpa", "torch_3op", "sdpa_flash"]
    plan = RunPlan(cases=cases, timing=timing_config("cpu").to_dict(), device_kind="cpu")
    assert (plan.reference, plan.baselines) == ("sdpa", {"attention": "sdpa", "rmsnorm": "rmsnorm_torch"})

    _attention_with(monkeypatch, baseline="sdpa_flash", references=("sdpa", "sdpa_math"))
    cases = plan_cases(["torch_3op", "sdpa", "sdpa_flash"], [SHAPES["cpu_tiny"]], ["fp16"], [False])
    assert [c.variant for c in cases] == ["sdpa_flash", "torch_3op", "sdpa"]
    plan = RunPlan(cases=cases, timing=timing_config("cpu").to_dict(), device_kind="cpu")
    loaded = RunPlan.load(plan.save(tmp_path / "plan.json"))  # what the child reads
    assert (loaded.baselines["attention"], loaded.references["attention"]) == ("sdpa_flash", ["sdpa", "sdpa_math"])

    timings = [_timing(case, median) for case, median in zip(cases, (20.0, 40.0, 25.0))]
    apply_gaps(timings, loaded.baselines, loaded.references)
    assert [t.gap_to_baseline for t in timings] == pytest.approx([1.0, 2.0, 1.25])
    assert {t.baseline_variant for t in timings} == {"sdpa_flash"}
    # The fastest reference measured in the group (sdpa_math was not): sdpa at 25 µs.
    assert [(t.fastest_reference, t.gap_to_fastest_reference) for t in timings] == [
        ("sdpa", pytest.approx(0.8)),
        ("sdpa", pytest.approx(1.6)),
        ("sdpa", pytest.approx(1.0)),
    ]
    assert timings[0].bytes == 4 * 1 * 2 * 128 * 64 * 2  # Q, K, V and O once, fp16


def test_a_baseline_that_is_not_a_registered_variant_of_the_operator_says_so_in_one_line(monkeypatch):
    _attention_with(monkeypatch, baseline="no_such_variant")
    with pytest.raises(
        ValueError,
        match=r"^operator 'attention': its baseline 'no_such_variant' is not a registered "
        r"attention variant$",
    ):
        RunPlan(cases=[], timing=timing_config("cpu").to_dict(), device_kind="cpu")
    assert registry.reference  # attention callers keep their name for it


def test_a_group_without_its_baseline_gets_no_gap():
    cases = plan_cases(["torch_3op", "sdpa_flash"], [SHAPES["cpu_tiny"]], ["fp16"], [True])
    timings = [_timing(case, median) for case, median in zip(cases, (30.0, 20.0))]
    apply_gaps(timings, {"attention": "sdpa"}, {"attention": ["sdpa_flash"]})
    assert [(t.gap_to_baseline, t.baseline_variant) for t in timings] == [(None, None), (None, None)]
    assert [t.gap_to_fastest_reference for t in timings] == pytest.approx([1.5, 1.0])
