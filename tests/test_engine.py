"""The one measuring engine (ci/engine) in this process on the CPU: the events it emits are the
documented vocabulary, correctness is checked once per case per process, each call is its own
interleave group, and callables are kept only when asked; the one median."""

from __future__ import annotations

import os

import pytest

from attnwatch.ci.engine.events import BY_VARIANT_STAGES, STAGES, by_variant
from attnwatch.ci.engine.group import CaseResult, Engine
from attnwatch.ci.plan import RunPlan, plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.history.analysis.statistics import median, summarize
from attnwatch.kernels.shapes import SHAPES

ENGINE_KINDS = {"build_begin", "build", "begin", "beat", "correctness", "result", "fault"}


@pytest.fixture(scope="module")
def measured():
    cases = plan_cases(["sdpa", "sdpa_math"], [SHAPES["cpu_tiny"]], ["fp16"], [False, True])
    timing = timing_config("cpu").with_overrides(min_samples=4, max_samples=8, time_cap_s=0.1)
    plan = RunPlan(cases=cases, timing=timing.to_dict(), device_kind="cpu", correctness=True, correctness_seeds=[0])
    events: list[dict] = []
    engine = Engine(plan, lambda kind, **fields: events.append({"kind": kind, **fields}))
    engine.build_all()
    rounds = [engine.measure(plan.cases, 0), engine.measure(plan.cases[:2], 1, keep_callables=True)]
    return engine, events, rounds


def test_every_event_is_of_the_one_vocabulary(measured):
    _, events, _ = measured
    assert {e["kind"] for e in events} <= ENGINE_KINDS
    assert {e["stage"] for e in events if e["kind"] in ("begin", "beat")} <= set(STAGES)
    results = [e for e in events if e["kind"] == "result"]
    assert len(results) == 4 + 2
    assert all(set(e) == {"kind", "case", *CaseResult("ok").message()} for e in results)


def test_each_groups_round_set_up_is_its_first_cases_placement_stage(measured):
    """The spacer and flush buffer a group's round starts with are timed as the `placement` stage
    (a compare's cost lines name it), announced under the group's first case, before its checks."""
    engine, events, _ = measured
    placed = [e["case"] for e in events if e["kind"] == "begin" and e["stage"] == "placement"]

    def firsts(cases) -> list[str]:
        groups: dict[str, str] = {}
        for case in cases:
            groups.setdefault(case.group, case.case_id)
        return list(groups.values())

    assert placed == firsts(engine.plan.cases) + firsts(engine.plan.cases[:2])  # the two measure calls
    first_placement = events.index(next(e for e in events if e.get("stage") == "placement"))
    assert first_placement < next(i for i, e in enumerate(events) if e.get("stage") == "correctness")
    assert engine.seconds["placement"] > 0  # the stage's time is counted, as a compare's side reads it


def test_the_warm_up_is_also_counted_by_variant(measured):
    """The seconds a worker reports with `done` split the warm-up by variant (a compare prints
    which kernel it went to), and the parts add up to the stage."""
    engine, _, _ = measured
    for stage in BY_VARIANT_STAGES:
        parts = by_variant(engine.seconds, stage)
        assert set(parts) == {"sdpa", "sdpa_math"}, stage
        assert sum(parts.values()) == pytest.approx(engine.seconds[stage])
    assert by_variant(engine.seconds, "timing") == {}  # a group's stage is not one variant's


def test_correctness_once_per_case_per_process(measured):
    engine, events, _ = measured
    checked = [e["case"] for e in events if e["kind"] == "correctness"]
    assert sorted(checked) == sorted(engine.cases)  # round 1 measured two cases again, unchecked
    first_result = next(i for i, e in enumerate(events) if e["kind"] == "result")
    first_check = next(i for i, e in enumerate(events) if e["kind"] == "correctness")
    assert first_check < first_result  # a check is sent the moment it exists, before any timing


def test_each_call_and_group_is_its_own_interleave_group(measured):
    engine, _, rounds = measured
    for r, results in enumerate(rounds):
        for case_id, result in results.items():
            assert result.status == "ok", result.error
            group = engine.cases[case_id].group
            assert result.timing["interleave_group"] == f"{group}#{os.getpid()}.{r}"
            if case_id.startswith("sdpa/"):
                assert result.timing["gap_to_baseline"] == 1.0
    assert rounds[0]["sdpa/cpu_tiny/fp16/noncausal"].samples_us != rounds[1]["sdpa/cpu_tiny/fp16/noncausal"].samples_us


def test_callables_are_kept_only_when_asked(measured):
    _, _, rounds = measured
    assert all(r.fn is None for r in rounds[0].values())
    assert all(callable(r.fn) for r in rounds[1].values())


def test_the_isolated_rerun_goes_through_the_stages_it_is_asked_for(measured):
    engine, events, _ = measured
    before = len(events)
    assert engine.probe("sdpa_math/cpu_tiny/fp16/causal", "host_timing") == {"status": "ok", "error": None}
    stages = [e["stage"] for e in events[before:] if e["kind"] == "begin"]
    assert stages == ["prepare", "warmup", "timing", "host_timing"]  # checked already; no graphs on a CPU


def test_the_one_median_is_the_stored_one():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0, 3.0, 10.0]) == 2.5 == summarize([1.0, 2.0, 3.0, 10.0]).median_us
    with pytest.raises(ValueError):
        median([])
