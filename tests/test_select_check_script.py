"""scripts/select_check.py on this CPU (--smoke): the scratch history, the compares, the files and
the table of the one GPU call it is written for, so that call does not fail on the script itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "select_check.py"
sys.path.insert(0, str(SCRIPT.parent))


def _report(measured: dict[str, str], canary: list[str], reference: str, moved: str | None = None) -> dict:
    """A compare.json's selection and cases as expectation() reads them (variant -> why)."""
    return {
        "selection": {
            "variants": [{"variant": v, "measured": bool(why), "reason": why} for v, why in measured.items()],
            "reference": reference,
            "canary": canary,
        },
        "cases": [
            {"case_id": f"{v}/s", "variant": v, "verdict": "regression" if v == moved else "no_change"}
            for v, why in measured.items()
            if why
        ],
    }


def test_the_expectations_hold_the_baseline_rule():
    """The A/A and the planted compare measure attention's reference alone of the baselines."""
    from select_check import expectation

    aa = {"sdpa": "reference", "triton_fa2": "canary", "torch_3op": "", "rmsnorm_torch": ""}
    assert expectation("aa", _report(aa, ["triton_fa2"], "sdpa"))[0]
    before = {**aa, "rmsnorm_torch": "baseline"}  # the old rule: every operator's baseline, always
    assert not expectation("aa", _report(before, ["triton_fa2"], "sdpa, rmsnorm_torch"))[0]
    planted = {**aa, "torch_3op": "changed"}
    assert expectation("planted", _report(planted, ["triton_fa2"], "sdpa", moved="torch_3op"))[0]
    assert not expectation(
        "planted",
        _report({**planted, "rmsnorm_torch": "baseline"}, ["triton_fa2"], "sdpa, rmsnorm_torch", moved="torch_3op"),
    )[0]


@pytest.mark.slow  # two compares in subprocesses
def test_smoke_runs_the_planted_and_engine_compares(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--smoke", "--compares", "planted,engine", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]  # 1: a CPU's noise broke an expectation
    summary = json.loads((out / "select_check.json").read_text())
    by_name = {r["name"]: r for r in summary["compares"]}
    assert by_name["warmup"]["skipped_step"] == by_name["aa"]["skipped_step"] == "not asked for"
    planted, engine = by_name["planted"], by_name["engine"]
    assert planted["rc"] == engine["rc"] == 0
    assert "torch_3op" in planted["measured"] and planted["skipped"]  # one unchanged sdpa variant not measured
    assert engine["everything"] == "the shared harness changed (ci/engine/group.py)" and not engine["skipped"]
    assert {"startup_s", "fingerprint_s", "timing_s", "judging_s", "wall_s"} <= set(planted["times"])
    assert sorted(p.name for p in out.iterdir()) == [
        "engine.json",
        "planted.json",
        "select_check.json",
        "select_check.log",
    ]
    table = done.stdout[done.stdout.index("compare ") :]
    assert "planted" in table and "engine" in table and "total" in table
