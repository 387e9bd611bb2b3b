"""The ncu runner, end to end, against a stand-in `ncu` executable (no GPU here).

The stand-in replays the real H200 CSV fixture (a whole `attnwatch ncu --shapes pr` pass, every
metric section) for the profiled cases, or fails the way ncu fails (exit 1 with ==ERROR==, a
permission error, a hang, a target that dies in one case), so the runner's handling of each is
exercised for real: subprocesses, process groups, timeouts, retries, report import and parsing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import stand_in_ncu  # tests/ helper

from attnwatch.ci.ncu.profile import profile_cases, CRASH_ERROR, HANG_ERROR
from attnwatch.history.contract.bundle import NCU_FILE, NCU_RAW_FILE
from attnwatch.history.contract.bundle_writer import write_ncu_files
from attnwatch.kernels.cases import Case
from attnwatch.kernels.shapes import SHAPES


REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch, fixtures_dir):
    return stand_in_ncu.install(tmp_path, monkeypatch, fixtures_dir)


def _cases():
    shape = SHAPES["b4_h16_s1k"]
    return [Case("sdpa", shape, "fp16", False), Case("torch_3op", shape, "fp16", False)]


def test_profiles_every_case_in_one_process_and_attributes_kernels_to_cases(fake_ncu, tmp_path):
    profile = profile_cases(_cases(), tmp_path / "work", gpu_name="NVIDIA H200")
    assert profile.errors == {}
    assert profile.ncu_version.startswith("Version 2025.3")
    assert [p.name for p in (tmp_path / "work").iterdir()] == ["pass0"]  # one ncu process for both variants
    assert profile.passes == [2, 2]  # ncu's "- N passes" line per profiled kernel
    by_case = {m.case_id: m for m in profile.case_metrics}
    sdpa = by_case["sdpa/b4_h16_s1k/fp16/noncausal"]
    unfused = by_case["torch_3op/b4_h16_s1k/fp16/noncausal"]
    assert sdpa.kernel_count == 1 and unfused.kernel_count == 3
    assert sdpa.duration_us == pytest.approx(43.136)
    assert sdpa.error is None  # every metric of the default sections was in ncu's output
    # derived from the case's own FLOPs and the measured fp16 ceiling
    assert sdpa.achieved_tflops == pytest.approx(4 * 4 * 16 * 1024 * 1024 * 64 / 43.136e-6 / 1e12)
    assert sdpa.peak_tflops == pytest.approx(666.5904706742397)  # history/analysis/ceilings.toml, H200 fp16 GEMM
    assert sdpa.pct_of_peak == pytest.approx(100 * sdpa.achieved_tflops / 666.5904706742397)
    assert len([r for r in profile.kernel_rows if r.case_id.startswith("torch_3op")]) == 3
    stalls = "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
    assert all(stalls in r.metrics for r in profile.kernel_rows)  # the stall section, per kernel

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    files = write_ncu_files(bundle, profile.files())
    assert files == {"ncu": NCU_FILE, "ncu_raw": NCU_RAW_FILE}
    document = json.loads((bundle / NCU_FILE).read_text())
    assert document["schema"] == "attnwatch.ncu" and document["schema_version"] == 1
    assert len(document["kernels"]) == 4 and len(document["cases"]) == 2


def test_ncu_missing_records_why_for_every_case(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNWATCH_NCU", str(tmp_path / "no-such-ncu"))
    profile = profile_cases(_cases(), tmp_path / "work")
    assert set(profile.errors) == {c.id for c in _cases()}
    assert all("ncu not found" in m.error for m in profile.case_metrics)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("fail", "returned an error code"), ("perm", "ERR_NVGPUCTRPERM"), ("perm_late", "ERR_NVGPUCTRPERM")],
)
def test_ncu_failure_is_recorded_per_case(fake_ncu, tmp_path, monkeypatch, mode, expected):
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    profile = profile_cases(_cases(), tmp_path / "work")
    assert len(profile.case_metrics) == 2
    for metrics in profile.case_metrics:
        assert metrics.kernel_count == 0
        assert expected in metrics.error


def test_ncu_hang_is_killed_at_the_timeout(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    started = time.monotonic()
    profile = profile_cases(_cases()[:1], tmp_path / "work", timeout_s=2)
    assert time.monotonic() - started < 30
    assert "timed out after 2 s" in profile.case_metrics[0].error


def test_one_failing_case_costs_only_itself(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "case_fails")
    shape = SHAPES["b4_h16_s1k"]
    cases = [Case("sdpa", shape, "fp16", False), Case("torch_3op", shape, "fp16", False)]
    profile = profile_cases(cases, tmp_path / "work")
    by_case = {m.case_id: m for m in profile.case_metrics}
    assert by_case[cases[0].id].kernel_count == 1 and by_case[cases[0].id].error is None
    assert by_case[cases[1].id].kernel_count == 0
    assert "RuntimeError: boom" in by_case[cases[1].id].error


def test_a_case_that_kills_the_target_costs_only_itself(fake_ncu, tmp_path, monkeypatch):
    """The target dies in torch_3op's case: the cases before it keep their metrics (the report
    ncu wrote), the cases after it are profiled in a fresh process."""
    monkeypatch.setenv("FAKE_NCU_MODE", "crash")
    shape = SHAPES["b4_h16_s1k"]
    cases = [
        Case("sdpa", shape, "fp16", False),
        Case("torch_3op", shape, "fp16", False),
        Case("triton_fa2", shape, "fp16", False),
    ]
    profile = profile_cases(cases, tmp_path / "work")
    by_case = {m.case_id: m for m in profile.case_metrics}
    assert by_case[cases[0].id].kernel_count == 1 and by_case[cases[2].id].kernel_count == 1
    assert by_case[cases[1].id].kernel_count == 0
    assert by_case[cases[1].id].error.startswith(CRASH_ERROR) and "error code (11)" in by_case[cases[1].id].error
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["pass0", "pass1"]


def test_a_hung_case_is_dropped_and_the_others_profiled_again(fake_ncu, tmp_path, monkeypatch):
    """ncu killed at its time limit writes no report: the hung case is recorded, the others
    (finished or not) go to a fresh process."""
    monkeypatch.setenv("FAKE_NCU_HANG", "torch_3op")
    monkeypatch.setenv("FAKE_NCU_MARKER", str(tmp_path / "marker"))
    shape = SHAPES["b4_h16_s1k"]
    cases = [
        Case("sdpa", shape, "fp16", False),
        Case("torch_3op", shape, "fp16", False),
        Case("triton_fa2", shape, "fp16", False),
    ]
    profile = profile_cases(cases, tmp_path / "work", timeout_s=3)
    by_case = {m.case_id: m for m in profile.case_metrics}
    assert by_case[cases[0].id].kernel_count == 1 and by_case[cases[2].id].kernel_count == 1
    assert by_case[cases[1].id].error == HANG_ERROR


def test_the_target_imports_the_kernels_it_is_given_not_the_callers(fake_ncu, tmp_path, monkeypatch):
    """`python -m` puts the working directory first on sys.path: started in a checkout, the
    target would import that checkout's kernels instead of `kernels_root`'s (a compare's base)."""
    monkeypatch.setenv("FAKE_NCU_CWD", str(tmp_path / "cwd"))
    monkeypatch.chdir(REPO_ROOT)
    profile_cases(_cases()[:1], tmp_path / "work")
    ran_in = Path((tmp_path / "cwd").read_text())
    assert ran_in != REPO_ROOT and not (ran_in / "kernels").exists()


def test_ncu_command_selects_cases_like_run_and_prints_the_table(fake_ncu, tmp_path, capsys):
    from attnwatch.cli.main import main

    out = tmp_path / "ncu-out"
    code = main(
        [
            "ncu",
            "--shapes",
            "main",
            "--variants",
            "sdpa,torch_3op",
            "--dtypes",
            "fp16",
            "--causal",
            "no",
            "--cases",
            "*/b4_h16_s1k/*",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "sdpa/b4_h16_s1k/fp16/noncausal" in printed and "43.14" in printed
    row = next(line for line in printed.splitlines() if line.strip().startswith("sdpa/b4_h16_s1k")).split()
    assert "DRAM_MB" in printed and row[3] != "-" and row[5] != "-"  # the default list fills every column
    assert "torch_3op/b4_h16_s1k/fp16/noncausal" in printed
    assert "2 cases" in printed
    document = json.loads((out / NCU_FILE).read_text())
    assert {c["case_id"] for c in document["cases"]} == {
        "sdpa/b4_h16_s1k/fp16/noncausal",
        "torch_3op/b4_h16_s1k/fp16/noncausal",
    }


def test_ncu_command_collects_the_chosen_sections_and_refuses_an_unknown_one(fake_ncu, tmp_path, capsys, monkeypatch):
    from attnwatch.cli.main import main

    seen = tmp_path / "args"
    monkeypatch.setenv("FAKE_NCU_ARGS", str(seen))
    args = ["ncu", "--shapes", "pr", "--variants", "sdpa", "--causal", "no", "--cases", "*/b4_h16_s1k/*"]
    assert main([*args, "--sections", "core,stalls", "--out", str(tmp_path / "a")]) == 0
    asked = json.loads(seen.read_text())
    metrics = asked[asked.index("--metrics") + 1].split(",")
    assert "gpu__time_duration.sum" in metrics and any("stalled_barrier" in m for m in metrics)
    assert "dram__bytes_read.sum" not in metrics  # the memory section was not asked for
    # only the target is injected (not a build's ninja), with metrics.toml's replay settings
    assert asked[asked.index("--target-processes") + 1] == "application-only"
    assert asked[asked.index("--cache-control") + 1] == "all" and asked[asked.index("--replay-mode") + 1] == "kernel"
    document = json.loads((tmp_path / "a" / NCU_FILE).read_text())
    assert document["cases"][0]["error"] is None  # what was not asked for is not "missing"
    assert main([*args, "--sections", "core,nope", "--out", str(tmp_path / "b")]) == 2
    assert "--sections: unknown ncu section 'nope'" in capsys.readouterr().err


def test_ncu_command_refuses_an_empty_selection(tmp_path, capsys):
    from attnwatch.cli.main import main

    code = main(["ncu", "--shapes", "main", "--variants", "sdpa", "--cases", "nothing/*", "--out", str(tmp_path)])
    assert code == 2
    assert "no cases selected" in capsys.readouterr().err


def test_the_target_rebuilds_every_operators_case_from_its_plan_entry():
    """The target once rebuilt every case as attention (`Shape(**fields)`, a causal flag): an
    RMSNorm case crashed the profiled process before its first kernel (H200, 2026-11-26)."""
    from attnwatch.ci.kernels_api import kernels_api
    from attnwatch.ci.ncu.profile import plan_entry
    from attnwatch.ci.ncu.target import case_of

    cases = [
        Case("sdpa", SHAPES["b4_h16_s1k"], "fp16", True),
        Case("rmsnorm_torch", SHAPES["rms_t4k_h2048"], "bf16", mode="fwd", operator="rmsnorm"),
    ]
    for case in cases:
        entry = json.loads(json.dumps(plan_entry(case)))  # as the plan file carries it
        rebuilt = case_of(kernels_api(), entry)
        assert rebuilt == case and rebuilt.id == case.id


def test_an_ncu_that_refuses_the_per_opcode_counts_still_profiles_the_rest(fake_ncu, tmp_path, monkeypatch):
    """The explain list holds the per-opcode counts (a SASS-patching metric); an ncu that cannot
    collect them costs those counts, not every counter of every case, and says so."""
    from attnwatch.ci.ncu.metrics import EXPLAIN, choose_sections

    monkeypatch.setenv("FAKE_NCU_MODE", "no_sass_metric")
    profile = profile_cases(_cases(), tmp_path / "profile", sections=choose_sections(EXPLAIN), timeout_s=60)
    assert not profile.errors and profile.kernel_rows
    assert profile.notes and "per-opcode" in profile.notes[0] and "sass__inst_executed_per_opcode" in profile.notes[0]


def test_an_ncu_that_refuses_the_shared_memory_wavefronts_still_profiles_the_rest(fake_ncu, tmp_path, monkeypatch):
    """ncu names a refused metric without the rollup it was asked with (`.sum`): the exact section
    is still recognised and dropped, not every counter."""
    from attnwatch.ci.ncu.metrics import EXPLAIN, choose_sections

    monkeypatch.setenv("FAKE_NCU_MODE", "no_shared_wavefronts")
    profile = profile_cases(_cases(), tmp_path / "profile", sections=choose_sections(EXPLAIN), timeout_s=60)
    assert not profile.errors and profile.kernel_rows
    assert profile.notes and "shared-memory wavefronts" in profile.notes[0]
    assert "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared" in profile.notes[0]
