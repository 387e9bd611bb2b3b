"""The crash-attribution rule (ci/attribution.py) on its own: what an isolated re-run's result
decides. The processes behind it are exercised in tests/test_run_attribution.py and
tests/test_compare_workers.py."""

from __future__ import annotations

from attnwatch.ci.attribution import ATTRIBUTED, UNKNOWN_ORIGIN, Crash, CrashAttribution, ProbeResult

CRASH = Crash(
    "cuda_wmma/l4_mission/fp16/noncausal",
    "graph",
    "CUDA error: an illegal memory access was encountered",
    "cuda_scalar/l4_mission/fp16/noncausal",
    "child 0",
)


def _probe(result: ProbeResult, calls: list):
    def probe(case_id: str, stage: str) -> ProbeResult:
        calls.append((case_id, stage))
        return result

    return probe


def test_crashing_alone_attributes_the_crash_to_the_case():
    calls: list = []
    decision = CrashAttribution().decide(CRASH, _probe(ProbeResult(True, "illegal memory access (alone)"), calls))
    assert not decision.retry and decision.status == "crashed"
    assert decision.error.startswith(f"{ATTRIBUTED}: during graph: CUDA error") and "alone: illegal" in decision.error
    assert calls == [(CRASH.case_id, "graph")]


def test_running_alone_cleanly_retries_once_then_records_unknown_origin():
    rule, calls = CrashAttribution(), []
    first = rule.decide(CRASH, _probe(ProbeResult(False), calls))
    assert first.retry and first.status is None
    assert first.note.startswith(f"{UNKNOWN_ORIGIN} during graph of {CRASH.case_id} (child 0)")
    assert "ran alone without error" in first.note and "just run cuda_scalar/l4_mission/fp16/noncausal" in first.note
    second = rule.decide(Crash(CRASH.case_id, "timing", "again", None, "child 2"), _probe(ProbeResult(True), calls))
    assert not second.retry and second.status == "crashed"
    assert second.error.startswith(UNKNOWN_ORIGIN) and ATTRIBUTED not in second.error
    assert len(calls) == 1  # the second crash is not re-run: the case had its one retry
    assert len(rule.notes) == 2


def test_an_inconclusive_re_run_blames_nobody():
    decision = CrashAttribution().decide(CRASH, _probe(ProbeResult(False, inconclusive="died before the case"), []))
    assert decision.retry and "inconclusive (died before the case)" in decision.note
