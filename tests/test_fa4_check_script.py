"""scripts/fa4_check.py on the CPU (--smoke): the one GPU call it is made for must not fail on a
typo, and it must run where duckdb, streamlit and plotly are missing (the GPU machine has none).
One real `attnwatch run` of the cpu set: sdpa is timed, fa4_sm90 is skipped with its reason, and
the reason is in the run bundle the script returns and in its summary; the probe's extra
correctness checks run on sdpa."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "fa4_check.py"


@pytest.mark.slow
def test_smoke_run_reports_fa4_skipped_with_its_reason_beside_a_timed_sdpa(tmp_path):
    missing = tmp_path / "missing"  # modules the GPU machine lacks: importing one fails
    missing.mkdir()
    for name in ("duckdb", "streamlit", "plotly"):
        (missing / f"{name}.py").write_text(f"raise ImportError('{name} is not on the GPU machine')\n")
    out = tmp_path / "out"
    env = {name: value for name, value in os.environ.items() if name != "ATTNWATCH_EXTRA_SITE"}
    env["PYTHONPATH"] = os.pathsep.join([str(missing), str(ROOT)])
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--budget-s", "300", "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["bundles.tar.gz", "fa4_check.json", "fa4_check.log"]

    report = json.loads((out / "fa4_check.json").read_text())
    probe = report["probe"]  # its checks run on sdpa under --smoke: the loop itself is exercised
    assert probe["available"] is False and "needs a Hopper GPU" in probe["reason"] and "error" not in probe
    assert probe["versions"]["torch"] and len(probe["checks"]) == 5
    assert all(c["passed"] for c in probe["checks"].values())
    assert "sdpa/b2_h3_s777_d64/fp16/causal/large_logits" in probe["checks"]
    assert report["steps"]["cpu"]["status"] == "complete"
    rows = report["cases"]
    assert sorted(rows) == ["fa4_sm90/cpu_tiny/fp16/causal", "fa4_sm90/cpu_tiny/fp16/noncausal"]
    for row in rows.values():
        assert row["status"] == "skipped" and "needs a Hopper GPU" in row["error"]
        assert row["sdpa_us"] > 0 and row["median_us"] is None  # the reference ran in the same run
    lines = done.stdout.splitlines()
    assert any(line.startswith("shape ") and "/cudnn" in line for line in lines)
    assert lines[-1].startswith("fa4_sm90: 0/2 cases timed, 0 failed correctness")

    with tarfile.open(out / "bundles.tar.gz") as tar:
        outcomes = json.load(tar.extractfile("cpu/outcomes.json"))["cases"]
    reasons = {o["case_id"]: o["error"] for o in outcomes if o["variant"] == "fa4_sm90"}
    assert reasons.keys() == rows.keys() and all("needs a Hopper GPU" in r for r in reasons.values())
