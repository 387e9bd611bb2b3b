"""scripts/power_check.py on a CPU with --smoke: the one GPU call's pipeline (processes, engine
with every recipe, evidence rows, aggregation, files, the table) cannot fail on a typo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "power_check.py"


def test_smoke_run_writes_its_three_files_and_prints_the_table_last(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent)}
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "cpu",
            "--smoke",
            "--children",
            "1",
            "--variants",
            "sdpa",
            "--budget-s",
            "150",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["power_check.json", "power_check.log", "power_trace.json"]
    report = json.loads((tmp_path / "power_check.json").read_text())
    recipes = ["plain", "clock", "paced_duty", "paced_power", "band"]
    assert report["processes"] == 1 and report["recipes_asked"] == recipes
    assert list(report["recipes"]) == recipes  # the figures per recipe
    assert report["recipes"]["plain"]["cost_vs_plain"] == 1.0
    labels = [row["label"] for row in report["evidence"]["one_case"]]
    assert labels == ["duty=1.0", "duty=0.75", "duty=0.5", "duty=0.33", "flush=off"]
    assert all(row["median_us"] > 0 for row in report["evidence"]["one_case"])
    assert any(k.startswith("plain|sdpa/cpu_tiny/fp16/") for k in report["cases"])
    last = proc.stdout.strip().splitlines()[-5:]
    assert [line.split()[0] for line in last] == ["plain", "clock", "paced_duty", "paced_power", "band"]
