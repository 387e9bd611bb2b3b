"""scripts/select_check.py on this CPU (--smoke): the scratch history, the compares, the files and
the table of the one GPU call it is written for, so that call does not fail on the script itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two compares in subprocesses

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "select_check.py"


def test_smoke_runs_the_planted_and_engine_compares(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--smoke", "--compares", "planted,engine",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]  # 1: a CPU's noise broke an expectation
    summary = json.loads((out / "select_check.json").read_text())
    by_name = {r["name"]: r for r in summary["compares"]}
    assert by_name["warmup"]["skipped_step"] == by_name["aa"]["skipped_step"] == "not asked for"
    planted, engine = by_name["planted"], by_name["engine"]
    assert planted["rc"] == engine["rc"] == 0
    assert "torch_3op" in planted["measured"] and planted["skipped"]  # one unchanged sdpa variant not measured
    assert engine["everything"] == "the shared harness changed (ci/engine/group.py)" and not engine["skipped"]
    assert {"startup_s", "fingerprint_s", "timing_s", "judging_s", "wall_s"} <= set(planted["times"])
    assert sorted(p.name for p in out.iterdir()) == ["engine.json", "planted.json", "select_check.json", "select_check.log"]
    table = done.stdout[done.stdout.index("compare "):]
    assert "planted" in table and "engine" in table and "total" in table
