"""scripts/verdict_check.py on this CPU: the scratch repository, the steps, the budget's skips, the
cache roots and the table of the one GPU call it is written for, so that call does not fail on the
script itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "verdict_check.py"
SMALL = ["--device", "cpu", "--changes", "torch_3op", "--variants", "sdpa,torch_3op", "--rounds", "1"]
SMALL += ["--causal", "no", "--dtypes", "fp16", "--no-correctness"]


def _run(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *SMALL, "--out", str(out), *extra], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done, json.loads((out / "verdict_check.json").read_text())


def test_a_step_the_budget_cannot_hold_is_skipped_with_its_reason(tmp_path):
    """16 s of budget: 15 kept for the last step, so no step starts; each says why, none reports a figure."""
    done, report = _run(tmp_path / "out", "--budget-s", "16", "--steps", "affected,empty,warm,next,restored,aa,all")
    steps = report["steps"]
    assert list(steps) == [
        "affected_torch_3op",
        "torch_3op_empty",
        "torch_3op_warm",
        "torch_3op_next",
        "torch_3op_restored",
        "aa_1",
        "aa_2",
        "torch_3op_all",
        "reference_cache",
        "cache",
    ]
    assert steps["reference_cache"] == {"skipped": "not asked for (--steps)"}
    assert "budget left, this step needs at least" in steps["affected_torch_3op"]["skipped"]
    assert "budget left" in steps["torch_3op_empty"]["skipped"] and "budget left" in steps["aa_1"]["skipped"]
    assert steps["torch_3op_warm"]["skipped"].startswith("torch_3op_empty did not run")
    assert steps["torch_3op_next"]["skipped"].startswith("torch_3op_empty did not run")
    assert all(set(r) == {"skipped"} for name, r in steps.items() if name != "cache")
    assert {"key", "root", "parts"} <= set(steps["cache"]["cache_key"])
    assert report["false_alarms"] == {} and "all_agrees" not in report
    table = done.stdout[done.stdout.index("step ") :]
    assert "skipped: not asked for" in table and "total" in table


@pytest.mark.slow  # an affected and three compares in subprocesses
def test_empty_then_next_then_restored_cache_root(tmp_path):
    """The change on an empty root; the next pull request (another head, the same base) on that
    root; the first change again on the root packed after the empty step and restored."""
    out = tmp_path / "out"
    done, report = _run(out, "--budget-s", "400", "--steps", "affected,empty,next,restored")
    steps = report["steps"]
    affected = steps["affected_torch_3op"]
    assert affected["rc"] == 0 and affected["changed"] == ["torch_3op"] and affected["gpu"] is True
    empty, restored, after = steps["torch_3op_empty"], steps["torch_3op_restored"], steps["torch_3op_next"]
    assert after["head"] not in (empty["head"], restored["head"]) and empty["head"] == restored["head"]
    assert after["target_s"] == 30
    for step in (empty, after, restored):
        assert step["rc"] == 0, step.get("error")
        assert step["changed"] == ["torch_3op"] and "sdpa" in step["measured"]
        assert {"startup_s", "builds_s", "correctness_s", "timing_s", "wall_s"} <= set(step["phases_s"])
        assert set(step["verdicts"]) == {"sdpa/cpu_tiny/fp16/noncausal", "torch_3op/cpu_tiny/fp16/noncausal"}
        assert step["cache_root_mib"]["total"] >= 0
        # where each side's warm-up went, by variant (nothing is built on this CPU)
        for side in ("base", "head"):
            assert set(step["by_variant"][side]["warmup_by_variant"]) == {"sdpa", "torch_3op"}
            assert step["by_variant"][side]["build_by_variant"] == {}
    assert empty["target_s"] == 120 and restored["target_s"] == 60
    assert empty["sealed"][-1].endswith("files written") and "every entry matches" in restored["verified"][-1]
    assert (
        empty["tar_mib"] >= 0 and empty["pack_s"] >= 0 and restored["unpack_s"] >= 0
    )  # no correctness: no reference stored
    assert steps["torch_3op_warm"] == {"skipped": "not asked for (--steps)"}
    assert set(steps["cache"]["roots_mib"]) == {"torch_3op"}
    assert (out / "torch_3op_empty" / "compare.json").is_file() and (out / "affected_torch_3op.json").is_file()
    assert "torch_3op_restored" in done.stdout[done.stdout.index("step ") :]
