"""The parent's bookkeeping (ci.suite_state) from journal events: what a crash or a hang in
flight becomes, builds that die, first outcome wins, and records that must come in pairs."""

from __future__ import annotations

import json

from attnwatch.ci.plan import plan_cases
from attnwatch.ci.suite_state import SuiteState, describe_exit
from attnwatch.kernels.shapes import SHAPES


def _state(variants=("sdpa", "cuda_wmma")) -> SuiteState:
    return SuiteState(plan_cases(list(variants), [SHAPES["h100_small"]], ["fp16"], [False, True]))


def test_crash_in_flight_is_left_to_the_attribution_of_that_case_only(tmp_path):
    """The case in flight is suspected, not convicted: the caller re-runs it alone
    (ci/attribution.py) before any outcome is set; the case before it is named."""
    s = _state()
    s.apply({"kind": "begin", "case": "sdpa/h100_small/fp16/noncausal", "stage": "prepare"})
    s.apply({"kind": "beat", "case": "cuda_wmma/h100_small/fp16/noncausal"})
    s.finish_generation(tmp_path / "none.json", rc=-6, timed_out=False, log_tail="Fatal", timeout_s=120)
    crash = s.take_crash()
    assert crash.case_id == "cuda_wmma/h100_small/fp16/noncausal" and crash.stage == "timing"
    assert "signal SIGABRT" in crash.error and "during timing" in crash.error
    assert crash.predecessor == "sdpa/h100_small/fp16/noncausal"
    assert s.take_crash() is None and not s.outcomes
    s.record(crash.case_id, "crashed", "crashed (attributed by isolated re-run): ...")
    assert [c.case_id for c in s.remaining()] == [
        "sdpa/h100_small/fp16/noncausal",
        "sdpa/h100_small/fp16/causal",
        "cuda_wmma/h100_small/fp16/causal",
    ]


def test_a_fault_journalled_by_the_child_names_its_case_and_error(tmp_path):
    s = _state()
    s.apply({"kind": "begin", "case": "cuda_wmma/h100_small/fp16/noncausal", "stage": "graph"})
    s.apply(
        {
            "kind": "fault",
            "case": "cuda_wmma/h100_small/fp16/noncausal",
            "stage": "graph",
            "error": "graph: CUDA error: illegal address",
        }
    )
    s.finish_generation(tmp_path / "none.json", rc=70, timed_out=False, log_tail="", timeout_s=120)
    crash = s.take_crash()
    assert crash.stage == "graph" and crash.error.startswith("graph: CUDA error: illegal address")
    assert "exit status 70" in crash.error


def test_a_build_that_hangs_costs_every_case_of_its_variant(tmp_path):
    s = _state()
    s.apply({"kind": "build_begin", "variant": "cuda_wmma"})
    s.finish_generation(tmp_path / "none.json", rc=-9, timed_out=True, log_tail="", timeout_s=900)
    assert {c: o.status for c, o in s.outcomes.items()} == {
        "cuda_wmma/h100_small/fp16/noncausal": "timeout",
        "cuda_wmma/h100_small/fp16/causal": "timeout",
    }
    assert s.builds["cuda_wmma"]["ok"] is False and "timeout" in s.builds["cuda_wmma"]["error"]


def test_a_build_that_poisons_the_child_fails_its_variant_with_what_the_child_said(tmp_path):
    """The engine's `fault` of a build (no case, the variant named) ends the child: the build
    record and the variant's cases carry the error it sent, not only the exit status."""
    s = _state()
    s.apply({"kind": "build_begin", "variant": "cuda_wmma"})
    s.apply(
        {
            "kind": "fault",
            "case": None,
            "stage": "build",
            "variant": "cuda_wmma",
            "error": "build: RuntimeError: CUDA error: an illegal instruction was encountered",
        }
    )
    s.finish_generation(tmp_path / "none.json", rc=70, timed_out=False, log_tail="", timeout_s=900)
    assert {o.status for o in s.outcomes.values()} == {"crashed"} and len(s.outcomes) == 2
    assert (
        "illegal instruction" in s.builds["cuda_wmma"]["error"] and "exit status 70" in s.builds["cuda_wmma"]["error"]
    )
    assert s.take_crash() is None


def test_first_outcome_wins_and_unknown_cases_are_ignored():
    s = _state(("sdpa",))
    s.apply({"kind": "outcome", "case": "sdpa/h100_small/fp16/causal", "status": "skipped", "error": "why"})
    s.apply({"kind": "outcome", "case": "sdpa/h100_small/fp16/causal", "status": "ok"})
    s.apply({"kind": "outcome", "case": "not/a/planned/case", "status": "ok"})
    assert s.outcomes["sdpa/h100_small/fp16/causal"].status == "skipped" and len(s.outcomes) == 1


def test_ok_without_its_records_is_not_a_measurement(tmp_path):
    s = _state(("sdpa",))
    cid = "sdpa/h100_small/fp16/causal"
    s.apply({"kind": "outcome", "case": cid, "status": "ok"})
    s.finish_generation(tmp_path / "none.json", rc=0, timed_out=False, log_tail="", timeout_s=1)
    assert s.outcomes[cid].status == "failed" and s.ok_ids() == []


def test_the_parent_keeps_one_copy_of_each_result(tmp_path):
    """A case's timing and samples come from its `measured` event, its host entry from its
    `bench` event; the child's pytest-benchmark file, which repeats the entries, gives only its
    header: its entries (here differing) are not a second copy to merge."""
    s = _state(("sdpa",))
    cid = "sdpa/h100_small/fp16/causal"
    timing = {"case_id": cid, "median_us": 1.0}
    s.apply({"kind": "result", "case": cid, "status": "ok", "timing": timing, "samples_us": [1.0]})
    s.apply({"kind": "bench", "case": cid, "entry": {"name": "journal", "extra_info": {"attnwatch_case": cid}}})
    s.apply({"kind": "outcome", "case": cid, "status": "ok"})
    path = tmp_path / "benchmark.json"
    path.write_text(
        json.dumps(
            {
                "machine_info": {"node": "n"},
                "commit_info": {},
                "version": "5.2.3",
                "benchmarks": [{"name": "file", "extra_info": {"attnwatch_case": cid}}],
            }
        )
    )
    s.finish_generation(path, rc=0, timed_out=False, log_tail="", timeout_s=1)
    (records,) = s.case_records()
    assert records.host_entry["name"] == "journal" and records.timing is timing and records.samples == [1.0]
    assert s.benchmark_header == {"machine_info": {"node": "n"}, "commit_info": {}, "version": "5.2.3"}
    assert s.ok_ids() == [cid]


def test_describe_exit():
    assert (
        describe_exit(-11) == "signal SIGSEGV"
        and describe_exit(3) == "exit status 3"
        and describe_exit(None) == "no exit status"
    )


def test_plain_progress_lines_name_each_finished_case(capsys, tmp_path):
    from attnwatch.ci.progress import Progress

    s = _state(("sdpa",))
    p = Progress(2, enabled=True, plain=True)
    for event in (
        {"kind": "build_begin", "variant": "sdpa"},
        {"kind": "build", "record": {"variant": "sdpa", "ok": True}},
        {
            "kind": "result",
            "case": "sdpa/h100_small/fp16/noncausal",
            "status": "ok",
            "timing": {"median_us": 17.06},
            "samples_us": [17.06],
        },
        {"kind": "outcome", "case": "sdpa/h100_small/fp16/noncausal", "status": "ok"},
    ):
        s.apply(event)
        p.on_event(event, s)
    s.apply({"kind": "begin", "case": "sdpa/h100_small/fp16/causal", "stage": "warmup"})
    s.finish_generation(tmp_path / "none.json", rc=-9, timed_out=True, log_tail="", timeout_s=120)
    p.sync(s)
    p.close()
    lines = capsys.readouterr().err.splitlines()
    assert "building sdpa" in lines[0] and "built sdpa: ok=True" in lines[1]
    assert lines[2].endswith("1/2 sdpa/h100_small/fp16/noncausal: ok median 17.06 us")
    assert "2/2 sdpa/h100_small/fp16/causal: timeout (no sign of life for 120 s during warmup" in lines[3]


def test_summary_calls_out_caps_throttling_and_correctness():
    from attnwatch.ci.summary import format_summary

    s = _state(("sdpa", "cuda_wmma"))
    for cid, converged, throttled in (
        ("sdpa/h100_small/fp16/noncausal", True, 0),
        ("cuda_wmma/h100_small/fp16/noncausal", False, 30),
    ):
        timing = {
            "case_id": cid,
            "median_us": 17.0,
            "tflops": 1.0,
            "gap_to_baseline": 1.0,
            "converged": converged,
            "rel_spread": 0.04,
            "throttled_samples": throttled,
            "throttle_reasons": ["sw_power_cap"] if throttled else [],
        }
        s.apply({"kind": "result", "case": cid, "status": "ok", "timing": timing, "samples_us": [17.0]})
        s.apply({"kind": "outcome", "case": cid, "status": "ok"})
    s.apply(
        {
            "kind": "correctness",
            "case": "cuda_wmma/h100_small/fp16/noncausal",
            "records": [{"passed": False}, {"passed": True}],
        }
    )
    text = format_summary(s, "cuda_events")
    assert "1 cases stopped at the sample/time cap" in text and "cuda_wmma/h100_small/fp16/noncausal at 4.0%" in text
    assert "WARNING: 1 cases have samples taken while the GPU was throttled (sw_power_cap)" in text
    assert "CORRECTNESS: 1 cases failed a check: cuda_wmma/h100_small/fp16/noncausal" in text
    assert "1/2" in text  # the per-case correctness column


def test_summary_shows_a_memory_bound_case_s_bandwidth():
    from attnwatch.ci.summary import format_summary

    s = _state(("sdpa",))
    cid = "sdpa/h100_small/fp16/noncausal"
    timing = {
        "case_id": cid,
        "median_us": 20.0,
        "tflops": 0.1,
        "gap_to_baseline": 1.0,
        "converged": True,
        "rel_spread": 0.01,
        "bound": "memory",
        "bytes": 5e7,
    }
    s.apply({"kind": "result", "case": cid, "status": "ok", "timing": timing, "samples_us": [20.0]})
    s.apply({"kind": "outcome", "case": cid, "status": "ok"})
    header, row = format_summary(s, "cuda_events").splitlines()[:2]
    assert "GB/s" in header and "  2500.0  " in row  # 5e7 bytes in 20 us


# The reasons a CPU run gives (issue 44): the summary cut them at 120 characters and the progress
# lines at 160, mid-word (a cut citation of the design doc's "Kernel variants" section, `needs a CUDA dev)`), the fix with them.
FA4_REASON = (
    "needs flash-attn-4: flash_attn.cute is not importable (ModuleNotFoundError: No module named "
    "'flash_attn'); pip install 'attnwatch[fa4]' (docs/design.md, \"Kernel variants\"), or install it with "
    "pip --target and name that folder in ATTNWATCH_EXTRA_SITE; needs a Hopper GPU (cc 9.x): torch "
    "2.13.0+cpu is a CPU-only build"
)
LIGER_REASON = (
    "needs a CUDA device: torch 2.13.0+cpu is a CPU-only build; needs the liger-kernel package: "
    "ModuleNotFoundError: No module named 'liger_kernel'; needs a CUDA device for Triton 3.9.0, or "
    "TRITON_INTERPRET=1 to run it on CPU (torch 2.13.0+cpu is a CPU-only build)"
)


def _skipped_state() -> SuiteState:
    s = _state(("sdpa", "fa4_sm90", "cuda_wmma"))
    reasons = {"fa4_sm90": FA4_REASON, "cuda_wmma": LIGER_REASON}
    for case in list(s.order):
        variant = case.split("/")[0]
        if variant == "sdpa":
            s.apply(
                {
                    "kind": "result",
                    "case": case,
                    "status": "ok",
                    "samples_us": [17.0],
                    "timing": {
                        "case_id": case,
                        "median_us": 17.0,
                        "tflops": 1.0,
                        "gap_to_baseline": 1.0,
                        "converged": True,
                        "rel_spread": 0.01,
                    },
                }
            )
            s.apply({"kind": "outcome", "case": case, "status": "ok"})
        else:
            s.apply({"kind": "outcome", "case": case, "status": "skipped", "error": reasons[variant]})
    return s


def _note(lines: list[str], number: int) -> str:
    """Note `number` under the summary's table: its first line and the indented lines after it."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"[{number}] "))
    end = start + 1
    while end < len(lines) and lines[end].startswith(" "):
        end += 1
    return "\n".join(lines[start:end])


def test_summary_gives_each_skip_reason_once_whole_and_wrapped_at_words():
    from attnwatch.ci.summary import format_summary

    lines = format_summary(_skipped_state(), "cpu_wall").splitlines()
    skipped = [line for line in lines if "/h100_small/" in line and " skipped" in line]
    assert sorted(line.rsplit(" ", 1)[1] for line in skipped) == ["[1]", "[1]", "[2]", "[2]"], lines
    for number, reason in ((1, FA4_REASON), (2, LIGER_REASON)):
        note = _note(lines, number)
        assert " ".join(note.split())[len(f"[{number}] ") :] == " ".join(reason.split()), note  # whole, words intact
        assert all(len(line) <= 100 for line in note.splitlines()) and len(note.splitlines()) > 1, note
    assert "\n".join(lines).count("No module named 'liger_kernel'") == 1  # once, not once per case


def test_progress_lines_cut_a_long_reason_at_a_word(capsys):
    from attnwatch.ci.progress import Progress

    s = _skipped_state()
    p = Progress(len(s.outcomes), enabled=True, plain=True)
    p.sync(s)
    lines = [line for line in capsys.readouterr().err.splitlines() if ": skipped (" in line]
    assert len(lines) == 4
    for line in lines:
        reason = line.split(": skipped (", 1)[1][:-1]
        whole = (FA4_REASON if reason.startswith("needs flash") else LIGER_REASON).split()
        shown = reason.removesuffix(" ...").split()
        assert len(reason) <= 160 and reason.endswith(" ..."), line
        # every word shown whole (the last one may lose a trailing comma or semicolon)
        assert shown[:-1] == whole[: len(shown) - 1] and shown[-1] == whole[len(shown) - 1].rstrip(",;:"), line
