"""scripts/rmsnorm_check.py, the rmsnorm operator's one GPU call, run on the CPU (--smoke) so that
a typo cannot cost the GPU run: with duckdb, streamlit and plotly made unimportable (the GPU
machine has none of them), its files, and its table printed last."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "scripts" / "rmsnorm_check.py"

# Runs the script as __main__ with the dashboard/history packages unimportable.
RUNNER = """
import runpy, sys
for name in ("duckdb", "streamlit", "plotly"):
    sys.modules[name] = None
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_smoke_run_checks_times_and_reports_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(SCRIPT), "--smoke", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["rmsnorm_check.json", "rmsnorm_check.log"]
    report = json.loads((out / "rmsnorm_check.json").read_text())
    assert [(g["shape"], g["dtype"]) for g in report["groups"]] == [("rms_cpu_tiny", "fp16"), ("rms_cpu_tiny", "bf16")]
    for group in report["groups"]:
        assert group["bytes"] == (2 * 8 * 200 + 200) * 2
        for name in ("rmsnorm_torch", "rmsnorm_triton"):
            record = group["variants"][name]
            assert record["passed"] and record["timing"]["median_us"] > 0, record
        assert group["variants"]["rmsnorm_torch"]["timing"]["x_baseline"] == 1.0
        assert "liger-kernel" in group["variants"]["rmsnorm_liger"]["skipped"]
        assert "quack-kernels" in group["variants"]["rmsnorm_quack"]["skipped"]
        assert group["copy"]["median_us"] > 0
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("bytes = x read + y written + w read")
    assert any(line.startswith("rms_cpu_tiny     bf16  rmsnorm_triton  ok ") for line in lines[-12:])


def test_a_spent_budget_starts_no_group_and_says_so(tmp_path, monkeypatch, capsys):
    import importlib.util

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # what --smoke sets, restored after the test
    spec = importlib.util.spec_from_file_location("rmsnorm_check", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--smoke", "--budget-s", "0", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "rmsnorm_check.json").read_text())
    assert report["groups"] == [] and report["not_run"] == ["rms_cpu_tiny/fp16: budget", "rms_cpu_tiny/bf16: budget"]
    assert "not run: rms_cpu_tiny/fp16: budget" in capsys.readouterr().out
