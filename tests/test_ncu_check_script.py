"""scripts/ncu_check.py end to end on the CPU against the stand-in `ncu`: every step the GPU call
takes runs (the cost rows, the fixed start, pass counts, the printed table), so a typo cannot
waste the one GPU call. The figures themselves mean nothing here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import stand_in_ncu  # tests/ helper

from attnwatch.ci.ncu.metrics import sections

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_every_step_runs_and_the_table_comes_last(tmp_path, monkeypatch, fixtures_dir):
    stand_in_ncu.install(tmp_path, monkeypatch, fixtures_dir)
    monkeypatch.setenv("FAKE_NCU_PASSES", "7")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [
            sys.executable,
            "scripts/ncu_check.py",
            "--device",
            "cpu",
            "--budget-s",
            "200",
            "--out",
            str(out),
            "--with",
            "aa",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "ncu_check.json").read_text())
    labels = [r["label"] for r in result["runs"]]
    assert {
        "default, pr",
        "explain, pr",
        "default, main",
        "default, pr, --cache-control none",
        "all sections, pr",
        "default, pr, causal",
        "default, main, causal",
    } <= set(labels)
    assert {f"{s.name} alone, pr" for s in sections()} <= set(labels)
    assert result["fixed"]["import_only_s"] > 0 and result["fixed"]["under_ncu_s"] > 0
    for row in result["runs"]:
        assert row["profiled"] == row["cases"] > 0, row
        assert row["passes"] == {"min": 7, "median": 7, "max": 7}  # parsed from ncu's per-kernel lines
        assert sum(row["kernels_per_case"].values()) == row["cases"]
        over_fixed = (row["wall_s"] - result["fixed"]["under_ncu_s"]) / row["cases"]
        assert abs(row["per_case_s"] - over_fixed) < 0.01 and row["wall_per_case_s"] > row["per_case_s"]
    none = next(r for r in result["runs"] if "none" in r["label"])
    assert none["cache_control"] == "none"
    assert result["aa"]["checked"] > 0 and result["aa"]["fired"] == 0
    assert (out / "pr_explain_raw.csv").read_text().count("<default domain>:") > 0
    assert len(list(out.iterdir())) <= 6
    tail = done.stdout.strip().splitlines()
    at = next(i for i, line in enumerate(tail) if "s/case" in line and "wall/case" in line)
    assert any("default, main" in line for line in tail[at:]) and "A/A false firings" in tail[-1]


def test_ncu_passes_asks_every_list_and_reports_an_unknown_metric(tmp_path, monkeypatch, fixtures_dir):
    """scripts/ncu_passes.py over the stand-in `ncu` (one pass per four metrics) and a probe
    built by the local nvcc: every metric alone, the default list, each leave-one-out and each
    candidate is asked; a candidate naming a metric ncu does not know carries ncu's error."""
    import shutil

    from attnwatch.ci.ncu.metrics import choose_sections, metric_specs, specs_in

    if not (shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists()):
        import pytest

        pytest.skip("needs nvcc to build the probe")
    stand_in_ncu.install(tmp_path, monkeypatch, fixtures_dir)
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        import ncu_passes
    finally:
        sys.path.remove(str(REPO_ROOT / "scripts"))
    monkeypatch.setitem(ncu_passes.CANDIDATES, "unknown name", ((), ("no_such__metric.sum",), "a test's"))
    out = tmp_path / "out"
    assert ncu_passes.main(["--out", str(out), "--budget-s", "600"]) == 0
    lists = {r["label"]: r for r in json.loads((out / "ncu_passes.json").read_text())["lists"]}
    explain = [s.metric for s in specs_in(choose_sections("explain"))]
    assert all(lists[f"alone: {s.metric}"]["passes"] == 1 for s in metric_specs())
    assert lists["explain list"]["passes"] == -(-len(explain) // 4)
    assert lists["default list"]["metrics"] == [s.metric for s in specs_in(None)]
    assert all(lists[f"explain without {m}"]["metrics"] == [x for x in explain if x != m] for m in explain)
    assert lists["candidate: dram total"]["metrics"].count("dram__bytes.sum") == 1
    assert "dram__bytes_read.sum" not in lists["candidate: dram total"]["metrics"]
    refused = lists["candidate: unknown name"]
    assert refused["passes"] is None and refused["error"] == "==ERROR== Failed to find metric no_such__metric.sum"
