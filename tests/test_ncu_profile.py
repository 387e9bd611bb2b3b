"""The ncu runner, end to end, against a stand-in `ncu` executable (no GPU here).

The stand-in replays the real H200 CSV fixture for the profiled variants, or fails the way ncu
fails (exit 1 with ==ERROR==, a permission error, a hang), so the runner's handling of each is
exercised for real: subprocesses, process groups, timeouts, report import and parsing.
"""

from __future__ import annotations

import json
import time

import pytest

import stand_in_ncu  # tests/ helper

from attnwatch.ci.ncu.profile import profile_cases
from attnwatch.history.contract.bundle import NCU_FILE, NCU_RAW_FILE
from attnwatch.history.contract.bundle_writer import write_ncu_files
from attnwatch.kernels.cases import Case
from attnwatch.kernels.shapes import SHAPES


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch, fixtures_dir):
    return stand_in_ncu.install(tmp_path, monkeypatch, fixtures_dir)


def _cases():
    shape = SHAPES["b4_h16_s1k"]
    return [Case("sdpa", shape, "fp16", False), Case("torch_3op", shape, "fp16", False)]


def test_profiles_each_variant_and_attributes_kernels_to_cases(fake_ncu, tmp_path):
    profile = profile_cases(_cases(), tmp_path / "work", gpu_name="NVIDIA H200")
    assert profile.errors == {}
    assert profile.ncu_version.startswith("Version 2025.3")
    by_case = {m.case_id: m for m in profile.case_metrics}
    sdpa = by_case["sdpa/b4_h16_s1k/fp16/noncausal"]
    unfused = by_case["torch_3op/b4_h16_s1k/fp16/noncausal"]
    assert sdpa.kernel_count == 1 and unfused.kernel_count == 4
    assert sdpa.duration_us == pytest.approx(43.68)
    # derived from the case's own FLOPs and the measured fp16 ceiling
    assert sdpa.achieved_tflops == pytest.approx(4 * 4 * 16 * 1024 * 1024 * 64 / 43.68e-6 / 1e12)
    assert sdpa.peak_tflops == pytest.approx(666.5904706742397)  # history/analysis/ceilings.toml, H200 fp16 GEMM
    assert sdpa.pct_of_peak == pytest.approx(100 * sdpa.achieved_tflops / 666.5904706742397)
    assert len([r for r in profile.kernel_rows if r.case_id.startswith("torch_3op")]) == 4

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    files = write_ncu_files(bundle, profile.files())
    assert files == {"ncu": NCU_FILE, "ncu_raw": NCU_RAW_FILE}
    document = json.loads((bundle / NCU_FILE).read_text())
    assert document["schema"] == "attnwatch.ncu" and document["schema_version"] == 1
    assert len(document["kernels"]) == 5 and len(document["cases"]) == 2


def test_ncu_missing_records_why_for_every_case(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNWATCH_NCU", str(tmp_path / "no-such-ncu"))
    profile = profile_cases(_cases(), tmp_path / "work")
    assert set(profile.errors) == {c.id for c in _cases()}
    assert all("ncu not found" in m.error for m in profile.case_metrics)


@pytest.mark.parametrize(("mode", "expected"), [("fail", "returned an error code"), ("perm", "ERR_NVGPUCTRPERM")])
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


def test_ncu_command_selects_cases_like_run_and_prints_the_table(fake_ncu, tmp_path, capsys):
    from attnwatch.ci.cli import main

    out = tmp_path / "ncu-out"
    code = main(["ncu", "--shapes", "main", "--variants", "sdpa,torch_3op", "--dtypes", "fp16", "--causal", "no",
                 "--cases", "*/b4_h16_s1k/*", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "sdpa/b4_h16_s1k/fp16/noncausal" in printed and "43.68" in printed
    assert "torch_3op/b4_h16_s1k/fp16/noncausal" in printed
    assert "2 cases" in printed
    document = json.loads((out / NCU_FILE).read_text())
    assert {c["case_id"] for c in document["cases"]} == {
        "sdpa/b4_h16_s1k/fp16/noncausal", "torch_3op/b4_h16_s1k/fp16/noncausal"}


def test_ncu_command_refuses_an_empty_selection(tmp_path, capsys):
    from attnwatch.ci.cli import main

    code = main(["ncu", "--shapes", "main", "--variants", "sdpa", "--cases", "nothing/*", "--out", str(tmp_path)])
    assert code == 2
    assert "no cases selected" in capsys.readouterr().err
