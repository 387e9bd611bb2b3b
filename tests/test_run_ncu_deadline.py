"""A GPU job that runs out of time loses nothing: the bundle is written before the ncu pass,
the ncu pass stops at the run's deadline, and a process killed during ncu leaves a valid bundle.

CPU runs (real children, real bundles, history's validator) with a stand-in `ncu` executable
that replays the real H200 CSV fixture, and hangs for the variants named in FAKE_NCU_HANG
(after writing a marker file with its process id, so a test knows the profiler is running). As on the H200, where
the call's time limit killed `gpu_check.py --ncu` during the ncu pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import stand_in_ncu as stand_in  # tests/ helper

from attnwatch.ci.ncu.profile import DEADLINE_ERROR, profile_cases
from attnwatch.ci.plan import plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.ci.supervisor import RunOptions, execute_suite
from attnwatch.ci.summary import format_ncu_line
from attnwatch.history.contract.validate import load_bundle
from attnwatch.kernels.cases import Case
from attnwatch.kernels.shapes import SHAPES

pytestmark = pytest.mark.slow  # child processes and a profiler that hangs until stopped

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def stand_in_ncu(tmp_path, monkeypatch, fixtures_dir):
    stand_in.install(tmp_path, monkeypatch, fixtures_dir)
    monkeypatch.setenv("FAKE_NCU_MARKER", str(tmp_path / "ncu-running"))
    return tmp_path / "ncu-running"


def _cases():
    return plan_cases(["sdpa", "torch_3op"], [SHAPES["cpu_tiny"]], ["fp16"], [False])


def _options(**changes) -> RunOptions:
    base = dict(
        shape_set="cpu",
        device_kind="cpu",
        correctness=False,
        progress=False,
        ncu=True,
        timing=timing_config("cpu").with_overrides(time_cap_s=0.1, max_samples=20, min_samples=5, host_rounds=2),
    )
    base.update(changes)
    return RunOptions(**base)


def test_profile_cases_records_variants_past_the_deadline(stand_in_ncu, tmp_path):
    shape = SHAPES["b4_h16_s1k"]
    cases = [Case("sdpa", shape, "fp16", False), Case("torch_3op", shape, "fp16", False)]
    profile = profile_cases(cases, tmp_path / "work", deadline=time.monotonic() - 1.0)
    assert [m.error for m in profile.case_metrics] == [DEADLINE_ERROR, DEADLINE_ERROR]
    assert profile.errors == {c.id: DEADLINE_ERROR for c in cases}


def test_profile_cases_stops_a_profiler_still_running_at_the_deadline(stand_in_ncu, tmp_path, monkeypatch):
    """A case that hangs at the deadline: ncu is killed then and writes no report, so no case of
    that pass has metrics; each says why."""
    monkeypatch.setenv("FAKE_NCU_HANG", "torch_3op")
    shape = SHAPES["b4_h16_s1k"]
    cases = [Case("sdpa", shape, "fp16", False), Case("torch_3op", shape, "fp16", False)]
    started = time.monotonic()
    profile = profile_cases(cases, tmp_path / "work", timeout_s=600.0, deadline=started + 6.0)
    assert time.monotonic() - started < 60  # stopped at the deadline, not at ncu's 600 s limit
    for metrics in profile.case_metrics:
        assert metrics.kernel_count == 0
        assert metrics.error.startswith(DEADLINE_ERROR + " (ncu stopped after")


def test_a_slow_pass_starts_no_case_past_the_stop_time_and_keeps_the_finished_ones(stand_in_ncu, tmp_path, monkeypatch):
    """The target starts no case once the deadline is near (less the report's margin): ncu then
    exits by itself, and the cases it finished keep their metrics."""
    monkeypatch.setenv("FAKE_NCU_SLOW", "sdpa")
    shape = SHAPES["b4_h16_s1k"]
    cases = [Case("sdpa", shape, "fp16", False), Case("torch_3op", shape, "fp16", False)]
    started = time.monotonic()
    profile = profile_cases(cases, tmp_path / "work", timeout_s=600.0, deadline=started + 12.0)
    assert time.monotonic() - started < 13
    by_case = {m.case_id: m for m in profile.case_metrics}
    assert by_case[cases[0].id].kernel_count == 1 and by_case[cases[0].id].error is None
    assert by_case[cases[1].id].kernel_count == 0 and by_case[cases[1].id].error == DEADLINE_ERROR


def test_deadline_during_ncu_leaves_the_timed_bundle_and_the_finished_ncu_records(stand_in_ncu, tmp_path, monkeypatch):
    """The bundle exists and validates before ncu starts; the deadline nears while the first
    case is being profiled, so the second is not started; the first's ncu records are added to
    the same bundle."""
    monkeypatch.setenv("FAKE_NCU_SLOW", "sdpa")
    seen: list[dict] = []
    options = _options(ncu_timeout_s=600.0)

    def on_bundle_written(bundle: Path) -> None:
        loaded = load_bundle(bundle)  # history's validator, at each moment the bundle is announced
        seen.append(
            {
                "run_id": loaded.manifest.run_id,
                "files": dict(loaded.manifest.files),
                "ok": sorted(o.case_id for o in loaded.outcomes if o.status == "ok"),
                "ncu_cases": len(loaded.ncu_cases),
            }
        )
        if len(seen) == 1:
            # The cases are measured: the job's time limit is now 8 s away, ncu not yet started.
            assert not stand_in_ncu.exists()
            options.deadline = time.monotonic() + 12.0

    options.on_bundle_written = on_bundle_written
    started = time.monotonic()
    result = execute_suite(_cases(), kernels_root=None, out_dir=tmp_path / "b", options=options)
    assert time.monotonic() - started < 300

    first, second = seen
    assert first["ok"] == ["sdpa/cpu_tiny/fp16/noncausal", "torch_3op/cpu_tiny/fp16/noncausal"]
    assert "ncu" not in first["files"] and first["ncu_cases"] == 0
    assert second["run_id"] == first["run_id"]
    assert second["files"] == {**first["files"], "ncu": "ncu.json", "ncu_raw": "ncu_raw.csv"}

    loaded = load_bundle(result.bundle)
    assert loaded.manifest.status == "complete"  # every case was measured; ncu is extra
    by_case = {m.case_id: m for m in loaded.ncu_cases}
    assert by_case["sdpa/cpu_tiny/fp16/noncausal"].kernel_count == 1
    assert by_case["sdpa/cpu_tiny/fp16/noncausal"].error is None
    assert by_case["torch_3op/cpu_tiny/fp16/noncausal"].error.startswith(DEADLINE_ERROR)
    assert [k.case_id for k in loaded.ncu_kernels] == ["sdpa/cpu_tiny/fp16/noncausal"]
    assert f"ncu: 1 of 2 cases {DEADLINE_ERROR}" in loaded.manifest.notes
    assert len(loaded.samples) == 2 and all(loaded.samples.values())
    assert not list(result.bundle.glob(".*.tmp"))
    line = format_ncu_line(result.ncu)  # what `attnwatch run` prints after the summary
    assert line.startswith("ncu: 1 of 2 cases profiled") and f"WARNING: 1 {DEADLINE_ERROR}" in line


def _kill_quietly(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(0.2)


def test_gpu_check_killed_during_ncu_still_returns_the_bundle(stand_in_ncu, tmp_path, monkeypatch):
    """gpu_check.py --ncu killed from outside (the GPU call's time limit) while ncu runs: its
    --out folder already holds the run's bundle, which validates, with every case timed."""
    monkeypatch.setenv("FAKE_NCU_HANG", "sdpa,torch_3op")
    out = tmp_path / "out"
    command = [
        sys.executable,
        str(REPO_ROOT / "scripts" / "gpu_check.py"),
        "--device",
        "cpu",
        "--shapes",
        "cpu",
        "--variants",
        "sdpa,torch_3op",
        "--causal",
        "no",
        "--no-correctness",
        "--time-cap",
        "0.1",
        "--ncu",
        "--budget-s",
        "3600",
        "--out",
        str(out),
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        _wait_for(
            lambda: (stand_in_ncu.exists() and len(stand_in_ncu.read_text().split()) == 2) or proc.poll() is not None,
            240,
            "the ncu pass to start",
        )
        assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the call's time limit: no clean-up runs
        proc.wait()
        proc.stdout.close()
        if stand_in_ncu.exists():  # the profiler runs in a process group of its own
            _kill_quietly(int(stand_in_ncu.read_text().split()[1]))
    assert sorted(p.name for p in out.iterdir()) == ["bundles.tar.gz", "gpu_check.json"]
    with tarfile.open(out / "bundles.tar.gz") as tar:
        tar.extractall(tmp_path / "returned", filter="data")
    loaded = load_bundle(tmp_path / "returned" / "run0")
    assert loaded.manifest.status == "complete"
    assert sorted(o.case_id for o in loaded.outcomes if o.status == "ok") == [
        "sdpa/cpu_tiny/fp16/noncausal",
        "torch_3op/cpu_tiny/fp16/noncausal",
    ]
    assert loaded.ncu_cases == [] and "ncu" not in loaded.manifest.files
    assert json.loads((out / "gpu_check.json").read_text())["cases"] == 2
