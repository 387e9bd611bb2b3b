"""Fault isolation end to end on a CPU: deliberately raising, crashing (abort, _exit, a
context-poisoning error) and hanging test variants cost only their cases; the bundle is still
valid (history's validator) with status `partial`, and results already journalled survive."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from attnwatch.ci.plan import plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.ci.supervisor import RunOptions, execute_suite
from attnwatch.history.contract.validate import load_bundle
from attnwatch.kernels.shapes import SHAPES

# child processes, deliberate crashes and an 8 s hang; the logs a lossy run keeps are removed after
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("remove_kept_run_dirs")]

FAULTS = str(Path(__file__).resolve().parent / "fault_variants")


def _options(**changes) -> RunOptions:
    base = dict(
        shape_set="cpu",
        device_kind="cpu",
        timing=timing_config("cpu").with_overrides(time_cap_s=0.1, max_samples=20, min_samples=5, host_rounds=2),
        correctness=False,
        case_timeout_s=8.0,
        progress=False,
        extra_variant_modules=["attnwatch_fault_variants"],
        extra_sys_path=[FAULTS],
    )
    base.update(changes)
    return RunOptions(**base)


def _outcomes(bundle: Path) -> dict[str, dict]:
    return {o["case_id"]: o for o in json.loads((bundle / "outcomes.json").read_text())["cases"]}


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    """One run over every kind of fault, with good variants before, between and after them."""
    names = [
        "t_ok",
        "t_raise",
        "t_abort_timed",
        "t_raise_timed",
        "t_exit",
        "t_hang",
        "t_poison",
        "t_slow",
        "t_noncausal",
    ]
    # The causal group runs first and is finished before the first crash kills that child.
    cases = plan_cases(["t_ok", "t_noncausal"], [SHAPES["cpu_tiny"]], ["fp16"], [True])
    cases += plan_cases(names, [SHAPES["cpu_tiny"]], ["fp16"], [False])
    out = tmp_path_factory.mktemp("faulty") / "bundle"
    return execute_suite(cases, kernels_root=None, out_dir=out, options=_options())


def test_each_fault_costs_only_its_case(faulty_run):
    o = _outcomes(faulty_run.bundle)
    status = {cid.split("/")[0] + ("/causal" if cid.endswith("/causal") else ""): v["status"] for cid, v in o.items()}
    assert status == {
        "t_ok": "ok",
        "t_raise": "failed",
        "t_abort_timed": "crashed",
        "t_raise_timed": "failed",
        "t_exit": "crashed",
        "t_hang": "timeout",
        "t_poison": "crashed",
        "t_slow": "ok",
        "t_noncausal": "ok",
        "t_ok/causal": "ok",
        "t_noncausal/causal": "unsupported",
    }


def test_errors_name_the_cause(faulty_run):
    o = {cid.split("/")[0]: v for cid, v in _outcomes(faulty_run.bundle).items() if cid.endswith("noncausal")}
    assert "refuses to prepare" in o["t_raise"]["error"]
    assert "signal SIGABRT" in o["t_abort_timed"]["error"] and "during timing" in o["t_abort_timed"]["error"]
    assert "exit status 3" in o["t_exit"]["error"] and "during prepare" in o["t_exit"]["error"]
    assert "no sign of life for 8 s during warmup" in o["t_hang"]["error"]
    assert "illegal memory access" in o["t_poison"]["error"]
    assert "failed on call 4" in o["t_raise_timed"]["error"]


def test_bundle_is_valid_and_partial(faulty_run):
    loaded = load_bundle(faulty_run.bundle)  # history's own validator
    manifest = json.loads((faulty_run.bundle / "manifest.json").read_text())
    assert manifest["status"] == "partial" and faulty_run.status == "partial"
    assert manifest["environment"]["device_kind"] == "cpu"
    timed = {t.case_id for t in loaded.timings}
    assert timed == {c for c, v in _outcomes(faulty_run.bundle).items() if v["status"] == "ok"}
    assert {b.case_id for b in loaded.benchmarks} == timed  # each with pytest-benchmark's host entry
    samples = json.loads((faulty_run.bundle / "samples.json").read_text())["samples"]
    assert set(samples) == timed


def test_results_journalled_before_a_crash_are_kept(faulty_run):
    """t_ok/causal was measured by the first child, which t_abort_timed later killed
    before pytest-benchmark wrote its file: its host entry and timing are the journal's."""
    bench = json.loads((faulty_run.bundle / "benchmark.json").read_text())
    entry = next(b for b in bench["benchmarks"] if b["extra_info"]["attnwatch_case"] == "t_ok/cpu_tiny/fp16/causal")
    assert entry["stats"]["rounds"] == 2 and entry["stats"]["median"] > 0
    timings = json.loads((faulty_run.bundle / "timings.json").read_text())["timings"]
    assert any(t["case_id"] == "t_ok/cpu_tiny/fp16/causal" and t["median_us"] > 0 for t in timings)
    assert faulty_run.work_dir is not None and any(faulty_run.work_dir.glob("log-*.log"))


def test_a_child_that_cannot_start_fails_cases_instead_of_looping(tmp_path):
    cases = plan_cases(["t_ok"], [SHAPES["cpu_tiny"]], ["fp16"], [False])
    result = execute_suite(
        cases,
        kernels_root=None,
        out_dir=tmp_path / "b",
        options=_options(extra_variant_modules=["no_such_variant_module_xyz"]),
    )
    outcome = _outcomes(result.bundle)["t_ok/cpu_tiny/fp16/noncausal"]
    assert outcome["status"] == "failed" and "no_such_variant_module_xyz" in outcome["error"]
    assert result.status == "failed"
    load_bundle(result.bundle)


def test_kernels_root_points_the_child_at_another_checkout(tmp_path):
    """compare's use: the child imports `kernels` from another checkout; ci stays this one's."""
    import shutil

    repo = Path(__file__).resolve().parent.parent
    other = tmp_path / "base"
    shutil.copytree(repo / "kernels", other / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    cases = plan_cases(["sdpa"], [SHAPES["cpu_tiny"]], ["fp16"], [False])
    result = execute_suite(
        cases,
        kernels_root=other,
        out_dir=tmp_path / "b",
        options=_options(extra_variant_modules=[], case_timeout_s=120.0),
    )
    assert _outcomes(result.bundle)["sdpa/cpu_tiny/fp16/noncausal"]["status"] == "ok"
    assert [s["kernels_path"] for s in result.state.sessions] == [str((other / "kernels").resolve())]


def test_deadline_ends_a_run_with_a_valid_bundle(tmp_path):
    """A hang with a long hang limit, but a run deadline: the run stops at the deadline and
    records the unfinished cases as not run, instead of waiting out the hang limit."""
    import time

    cases = plan_cases(["t_ok", "t_hang"], [SHAPES["cpu_tiny"]], ["fp16"], [False])
    result = execute_suite(
        cases,
        kernels_root=None,
        out_dir=tmp_path / "b",
        options=_options(case_timeout_s=3600.0, deadline=time.monotonic() + 20.0),
    )
    outcomes = _outcomes(result.bundle)
    assert {o["status"] for o in outcomes.values()} == {"failed"}
    assert all("deadline" in o["error"] for o in outcomes.values())
    assert result.status == "failed"
    load_bundle(result.bundle)


def test_interrupt_keeps_finished_cases_in_a_valid_bundle(tmp_path):
    """Ctrl-C (SIGINT) during a hang: the child is killed, the finished group is kept, the
    rest is recorded as not run, and the bundle is valid."""
    import subprocess
    import sys

    out = tmp_path / "b"
    script = f"""
import signal, sys, time
from pathlib import Path
sys.path.insert(0, {FAULTS!r})
from attnwatch.ci.plan import plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.ci.supervisor import RunOptions, execute_suite
from attnwatch.kernels.shapes import SHAPES
cases = plan_cases(["t_ok"], [SHAPES["cpu_tiny"]], ["fp16"], [True]) + plan_cases(["t_hang"], [SHAPES["cpu_tiny"]], ["fp16"], [False])
options = RunOptions(shape_set="cpu", device_kind="cpu", correctness=False, case_timeout_s=3600.0, progress=False,
                     timing=timing_config("cpu").with_overrides(time_cap_s=0.1, max_samples=20, min_samples=5, host_rounds=2),
                     extra_variant_modules=["attnwatch_fault_variants"], extra_sys_path=[{FAULTS!r}])
import os, threading
def interrupt_once_hung(*_):
    raise KeyboardInterrupt
def wait_for_the_hang():  # t_hang leaves its marker as it starts to sleep (however loaded the machine)
    while not list(Path({str(tmp_path)!r}).glob("hanging-*")):
        time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGALRM)
signal.signal(signal.SIGALRM, interrupt_once_hung)
threading.Thread(target=wait_for_the_hang, daemon=True).start()
try:
    execute_suite(cases, kernels_root=None, out_dir=Path({str(out)!r}), options=options)
except KeyboardInterrupt as exc:
    print("interrupted:", exc)
    sys.exit(130)
"""
    env = {**os.environ, "ATTNWATCH_TEST_MARKER_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 130, done.stderr[-2000:]
    outcomes = _outcomes(out)
    assert outcomes["t_ok/cpu_tiny/fp16/causal"]["status"] == "ok"
    assert outcomes["t_hang/cpu_tiny/fp16/noncausal"]["status"] == "failed"
    assert "interrupted" in outcomes["t_hang/cpu_tiny/fp16/noncausal"]["error"]
    load_bundle(out)
