"""The parent's bookkeeping (ci.suite_state) from journal events: what a crash or a hang in
flight becomes, builds that die, first outcome wins, and records that must come in pairs."""

from __future__ import annotations

import json

from ci.plan import plan_cases
from ci.suite_state import SuiteState, describe_exit
from kernels.shapes import SHAPES


def _state(variants=("sdpa", "cuda_wmma")) -> SuiteState:
    return SuiteState(plan_cases(list(variants), [SHAPES["h100_small"]], ["fp16"], [False, True]))


def test_crash_in_flight_is_left_to_the_attribution_of_that_case_only(tmp_path):
    """The case in flight is suspected, not convicted: the caller re-runs it alone
    (ci/attribution.py) before any outcome is set; the case before it is named."""
    s = _state()
    s.apply({"e": "begin", "case": "sdpa/h100_small/fp16/noncausal", "phase": "prepare"})
    s.apply({"e": "beat", "case": "cuda_wmma/h100_small/fp16/noncausal"})
    s.finish_generation(tmp_path / "none.json", rc=-6, timed_out=False, log_tail="Fatal", timeout_s=120)
    crash = s.take_crash()
    assert crash.case_id == "cuda_wmma/h100_small/fp16/noncausal" and crash.stage == "timing"
    assert "signal SIGABRT" in crash.error and "during timing" in crash.error
    assert crash.predecessor == "sdpa/h100_small/fp16/noncausal"
    assert s.take_crash() is None and not s.outcomes
    s.record(crash.case_id, "crashed", "crashed (attributed by isolated re-run): ...")
    assert [c.case_id for c in s.remaining()] == ["sdpa/h100_small/fp16/noncausal", "sdpa/h100_small/fp16/causal",
                                                  "cuda_wmma/h100_small/fp16/causal"]


def test_a_fault_journalled_by_the_child_names_its_case_and_error(tmp_path):
    s = _state()
    s.apply({"e": "begin", "case": "cuda_wmma/h100_small/fp16/noncausal", "phase": "graph"})
    s.apply({"e": "fault", "case": "cuda_wmma/h100_small/fp16/noncausal", "error": "graph: CUDA error: illegal address"})
    s.finish_generation(tmp_path / "none.json", rc=70, timed_out=False, log_tail="", timeout_s=120)
    crash = s.take_crash()
    assert crash.stage == "graph" and crash.error.startswith("graph: CUDA error: illegal address")
    assert "exit status 70" in crash.error


def test_a_build_that_hangs_costs_every_case_of_its_variant(tmp_path):
    s = _state()
    s.apply({"e": "build_begin", "variant": "cuda_wmma"})
    s.finish_generation(tmp_path / "none.json", rc=-9, timed_out=True, log_tail="", timeout_s=900)
    assert {c: o.status for c, o in s.outcomes.items()} == {
        "cuda_wmma/h100_small/fp16/noncausal": "timeout", "cuda_wmma/h100_small/fp16/causal": "timeout"}
    assert s.builds["cuda_wmma"]["ok"] is False and "timeout" in s.builds["cuda_wmma"]["error"]


def test_first_outcome_wins_and_unknown_cases_are_ignored():
    s = _state(("sdpa",))
    s.apply({"e": "outcome", "case": "sdpa/h100_small/fp16/causal", "status": "skipped", "error": "why"})
    s.apply({"e": "outcome", "case": "sdpa/h100_small/fp16/causal", "status": "ok"})
    s.apply({"e": "outcome", "case": "not/a/planned/case", "status": "ok"})
    assert s.outcomes["sdpa/h100_small/fp16/causal"].status == "skipped" and len(s.outcomes) == 1


def test_ok_without_its_records_is_not_a_measurement(tmp_path):
    s = _state(("sdpa",))
    cid = "sdpa/h100_small/fp16/causal"
    s.apply({"e": "outcome", "case": cid, "status": "ok"})
    s.finish_generation(tmp_path / "none.json", rc=0, timed_out=False, log_tail="", timeout_s=1)
    assert s.outcomes[cid].status == "failed" and s.ok_ids() == []


def test_the_parent_keeps_one_copy_of_each_result(tmp_path):
    """A case's timing and samples come from its `measured` event, its host entry from its
    `bench` event; the child's pytest-benchmark file, which repeats the entries, gives only its
    header: its entries (here differing) are not a second copy to merge."""
    s = _state(("sdpa",))
    cid = "sdpa/h100_small/fp16/causal"
    timing = {"case_id": cid, "median_us": 1.0}
    s.apply({"e": "measured", "case": cid, "timing": timing, "samples": [1.0]})
    s.apply({"e": "bench", "case": cid, "entry": {"name": "journal", "extra_info": {"attnwatch_case": cid}}})
    s.apply({"e": "outcome", "case": cid, "status": "ok"})
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps({"machine_info": {"node": "n"}, "commit_info": {}, "version": "5.2.3",
                                "benchmarks": [{"name": "file", "extra_info": {"attnwatch_case": cid}}]}))
    s.finish_generation(path, rc=0, timed_out=False, log_tail="", timeout_s=1)
    (records,) = s.case_records()
    assert records.host_entry["name"] == "journal" and records.timing is timing and records.samples == [1.0]
    assert s.benchmark_header == {"machine_info": {"node": "n"}, "commit_info": {}, "version": "5.2.3"}
    assert s.ok_ids() == [cid]


def test_describe_exit():
    assert describe_exit(-11) == "signal SIGSEGV" and describe_exit(3) == "exit status 3" and describe_exit(None) == "no exit status"


def test_plain_progress_lines_name_each_finished_case(capsys, tmp_path):
    from ci.progress import Progress

    s = _state(("sdpa",))
    p = Progress(2, enabled=True, plain=True)
    for event in ({"e": "build_begin", "variant": "sdpa"}, {"e": "build", "record": {"variant": "sdpa", "ok": True}},
                  {"e": "measured", "case": "sdpa/h100_small/fp16/noncausal", "timing": {"median_us": 17.06}, "samples": [17.06]},
                  {"e": "outcome", "case": "sdpa/h100_small/fp16/noncausal", "status": "ok"}):
        s.apply(event)
        p.on_event(event, s)
    s.apply({"e": "begin", "case": "sdpa/h100_small/fp16/causal", "phase": "warmup"})
    s.finish_generation(tmp_path / "none.json", rc=-9, timed_out=True, log_tail="", timeout_s=120)
    p.sync(s)
    p.close()
    lines = capsys.readouterr().err.splitlines()
    assert "building sdpa" in lines[0] and "built sdpa: ok=True" in lines[1]
    assert lines[2].endswith("1/2 sdpa/h100_small/fp16/noncausal: ok median 17.06 us")
    assert "2/2 sdpa/h100_small/fp16/causal: timeout (no sign of life for 120 s during warmup" in lines[3]


def test_summary_calls_out_caps_throttling_and_correctness():
    from ci.summary import format_summary

    s = _state(("sdpa", "cuda_wmma"))
    for cid, converged, throttled in (("sdpa/h100_small/fp16/noncausal", True, 0), ("cuda_wmma/h100_small/fp16/noncausal", False, 30)):
        timing = {"case_id": cid, "median_us": 17.0, "tflops": 1.0, "gap_to_sdpa": 1.0, "converged": converged,
                  "rel_spread": 0.04, "throttled_samples": throttled, "throttle_reasons": ["sw_power_cap"] if throttled else []}
        s.apply({"e": "measured", "case": cid, "timing": timing, "samples": [17.0]})
        s.apply({"e": "outcome", "case": cid, "status": "ok"})
    s.apply({"e": "correctness", "case": "cuda_wmma/h100_small/fp16/noncausal", "records": [{"passed": False}, {"passed": True}]})
    text = format_summary(s, "cuda_events")
    assert "1 cases stopped at the sample/time cap" in text and "cuda_wmma/h100_small/fp16/noncausal at 4.0%" in text
    assert "WARNING: 1 cases have samples taken while the GPU was throttled (sw_power_cap)" in text
    assert "CORRECTNESS: 1 cases failed a check: cuda_wmma/h100_small/fp16/noncausal" in text
    assert "1/2" in text  # the per-case correctness column
