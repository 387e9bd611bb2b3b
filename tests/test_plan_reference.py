"""The gaps' reference is the registry's `is_reference` variant, declared once (kernels/registry.py).

The plan puts it first in every interleave group and names it, so the measuring child takes
every gap against it; moving the flag moves all of that, with no second declaration to update.
"""

from __future__ import annotations

import pytest

from attnwatch.ci.plan import RunPlan, plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.ci.timing.derived import apply_gaps, case_timing
from attnwatch.ci.timing.engine import RawMeasurement
from attnwatch.kernels import registry
from attnwatch.kernels.shapes import SHAPES


def _timing(case, median: float):
    raw = RawMeasurement(key=case.case_id, timing_mode="cpu_wall", samples_us=[median * 0.99, median, median * 1.01])
    return case_timing(case, raw, case.group)


def test_the_plan_follows_the_registry_s_flag(tmp_path, monkeypatch):
    cases = plan_cases(["torch_3op", "sdpa_flash", "sdpa"], [SHAPES["cpu_tiny"]], ["fp16"], [False])
    assert [c.variant for c in cases] == ["sdpa", "torch_3op", "sdpa_flash"]
    assert RunPlan(cases=cases, timing=timing_config("cpu").to_dict(), device_kind="cpu").reference == "sdpa"

    monkeypatch.setattr(registry.get("sdpa"), "is_reference", False)
    monkeypatch.setattr(registry.get("sdpa_flash"), "is_reference", True)
    cases = plan_cases(["torch_3op", "sdpa", "sdpa_flash"], [SHAPES["cpu_tiny"]], ["fp16"], [False])
    assert [c.variant for c in cases] == ["sdpa_flash", "torch_3op", "sdpa"]
    plan = RunPlan(cases=cases, timing=timing_config("cpu").to_dict(), device_kind="cpu")
    assert RunPlan.load(plan.save(tmp_path / "plan.json")).reference == "sdpa_flash"  # what the child reads

    timings = [_timing(case, median) for case, median in zip(cases, (20.0, 40.0, 25.0))]
    apply_gaps(timings, {"sdpa": "sdpa", "sdpa_flash": "sdpa", "torch_3op": "torch"}, plan.reference)
    assert [t.gap_to_sdpa for t in timings] == pytest.approx([1.0, 2.0, 1.25])


def test_a_registry_without_a_reference_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(registry.get("sdpa"), "is_reference", False)
    with pytest.raises(ValueError, match=r"^0 registered variants are marked is_reference: exactly one must be$"):
        plan_cases(["sdpa"], [SHAPES["cpu_tiny"]], ["fp16"], [False])
