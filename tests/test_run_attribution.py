"""Who caused a crash (ci/attribution.py), end to end through `attnwatch run`'s children on a
CPU: an asynchronous fault is charged to the case that issued it, a crash that does not recur
costs no case, and one that only happens after another case is recorded as of unknown origin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnwatch.ci.attribution import ATTRIBUTED, UNKNOWN_ORIGIN
from attnwatch.ci.plan import plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.ci.supervisor import RunOptions, execute_suite
from attnwatch.history.contract.validate import load_bundle
from attnwatch.kernels.shapes import SHAPES

# child processes and their isolated re-runs; the logs a lossy run keeps are removed after
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("remove_kept_run_dirs")]

FAULTS = str(Path(__file__).resolve().parent / "fault_variants")


def _run(tmp_path, variants: list[str]):
    options = RunOptions(
        shape_set="cpu",
        device_kind="cpu",
        correctness=False,
        case_timeout_s=60.0,
        progress=False,
        timing=timing_config("cpu").with_overrides(time_cap_s=0.1, max_samples=20, min_samples=5, host_rounds=2),
        extra_variant_modules=["attnwatch_fault_variants"],
        extra_sys_path=[FAULTS],
    )
    cases = plan_cases(variants, [SHAPES["cpu_tiny"]], ["fp16"], [False])
    result = execute_suite(cases, kernels_root=None, out_dir=tmp_path / "bundle", options=options)
    load_bundle(result.bundle)  # whatever happened, the history's validator accepts the bundle
    outcomes = json.loads((result.bundle / "outcomes.json").read_text())["cases"]
    notes = json.loads((result.bundle / "manifest.json").read_text())["notes"]
    return {o["case_id"].split("/")[0]: o for o in outcomes}, notes


def test_an_asynchronous_fault_is_charged_to_the_case_that_caused_it(tmp_path):
    """t_async_fault's calls return normally; the error appears at the next synchronization.
    The harness synchronizes after every block, so it surfaces in t_async_fault's own stage, and
    the isolated re-run confirms it; the cases around it are measured."""
    outcomes, _ = _run(tmp_path, ["t_ok", "t_async_fault", "t_slow"])
    assert outcomes["t_async_fault"]["status"] == "crashed"
    assert outcomes["t_async_fault"]["error"].startswith(ATTRIBUTED)
    assert "asynchronous, reported at the next synchronization" in outcomes["t_async_fault"]["error"]
    assert outcomes["t_ok"]["status"] == outcomes["t_slow"]["status"] == "ok"


def test_a_crash_that_does_not_recur_costs_no_case(tmp_path, monkeypatch):
    """Like cuda_wmma's illegal address in 2 of 4 main runs: the case crashes once, runs alone
    without error, is measured again, and the run keeps a note instead of a crashed outcome."""
    monkeypatch.setenv("ATTNWATCH_TEST_MARKER_DIR", str(tmp_path))
    outcomes, notes = _run(tmp_path, ["t_ok", "t_crash_once"])
    assert outcomes["t_crash_once"]["status"] == "ok"
    assert outcomes["t_ok"]["status"] == "ok"
    assert f"{UNKNOWN_ORIGIN} during timing of t_crash_once/cpu_tiny/fp16/noncausal" in notes
    assert "ran alone without error" in notes


def test_a_crash_only_after_another_case_is_not_attributed(tmp_path):
    """t_victim faults only when t_corrupt ran before it in the same process: alone it is fine,
    so its crash is recorded as of unknown origin (never as its own), and t_corrupt is measured."""
    outcomes, notes = _run(tmp_path, ["t_corrupt", "t_victim"])
    victim = outcomes["t_victim"]
    assert victim["status"] == "crashed"
    assert victim["error"].startswith(UNKNOWN_ORIGIN) and ATTRIBUTED not in victim["error"]
    assert outcomes["t_corrupt"]["status"] == "ok"
    assert "the process had just run t_corrupt/cpu_tiny/fp16/noncausal" in notes


def test_diagnose_runs_children_with_launch_blocking_and_stays_out_of_the_history(tmp_path, capsys, monkeypatch):
    from attnwatch.cli.main import main
    from attnwatch.ci.supervisor import _child_env

    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    options = RunOptions(shape_set="cpu", device_kind="cpu", timing=timing_config("cpu"), diagnose=True)
    assert _child_env(tmp_path, None, options)["CUDA_LAUNCH_BLOCKING"] == "1"
    plain = RunOptions(shape_set="cpu", device_kind="cpu", timing=timing_config("cpu"))
    assert "CUDA_LAUNCH_BLOCKING" not in _child_env(tmp_path, None, plain)
    assert main(["run", "--diagnose", "--ingest", "--shapes", "cpu", "--device", "cpu"]) == 2
    assert "not for the history" in capsys.readouterr().err
