"""scripts/gpu_compare.py on this CPU: the GPU script's own path (steps, budget, files, table)
runs here, so the one GPU call it is written for does not fail on the script itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two compares in subprocesses

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_compare.py"


def test_planted_step_and_budget_skips_on_cpu(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--steps",
            "planted,sanitizer,diagnose",
            "--slowdown",
            "3.0",
            "--rounds",
            "4",
            "--min-rounds",
            "3",
            "--budget-s",
            "250",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((out / "gpu_compare.json").read_text())
    planted = report["steps"]["planted"]
    assert planted["rc"] == 1  # --fail-on regression: the planted slowdown fails the check
    # (a shared CPU's noise may flag an sdpa case too: a CPU compare checks the pipeline, not kernels)
    assert {"t_planted/cpu_tiny/fp16/causal", "t_planted/cpu_tiny/fp16/noncausal"} <= set(planted["regressions"])
    assert set(planted["breakdown_s"]) == {"base", "head"} and planted["breakdown_s"]["head"]["timing_s"] > 0
    # every timed call of every round bundle counted, and what one cost
    assert all(c["calls"] >= 3 * 2 * 10 and c["timing_us_per_call"] > 0 for c in planted["sampling"].values())
    assert report["steps"]["sanitizer"] == {"step": "sanitizer", "skipped": "no GPU"}
    diagnose = report["steps"]["diagnose"]
    assert diagnose["rc"] == 0 and diagnose["statuses"]["ok"] >= 1 and not diagnose["lost"]
    assert "diagnostic" in diagnose["notes"] or "CUDA_LAUNCH_BLOCKING" in diagnose["notes"]
    assert (out / "planted" / "compare.json").is_file() and (out / "planted" / "session.json").is_file()
    table = done.stdout[done.stdout.index("step ") :]
    assert "planted" in table and "skipped: no GPU" in table and "total" in table
