"""scripts/engine_check.py's side-by-side (`--against`) on two recorded results: the rows a
reader compares, and the summary of how far the `main` medians moved (no GPU, no run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "engine_check.py"


def _result(commit: str, medians: dict[str, float], ratios: dict[str, float]) -> dict:
    return {
        "commit": commit,
        "gpu_name": "NVIDIA H200",
        "main": {
            "wall_s": 300.0,
            "statuses": {"ok": len(medians)},
            "cases": {c: {"median_us": m, "rel_spread": 0.01, "n": 3000} for c, m in medians.items()},
        },
        "compare": {
            "wall_s": 130.0,
            "verdicts": {"no change": len(ratios)},
            "cases": {
                c: {"verdict": "no change", "ratio": r, "low": r - 0.01, "high": r + 0.01} for c, r in ratios.items()
            },
        },
    }


def test_against_prints_both_trees_and_how_far_main_moved(tmp_path):
    small, large, skipped = "sdpa/h100_small/fp16/causal", "sdpa/b4_h16_s1k/fp16/causal", "sdpa_cudnn/x/fp16/causal"
    before = _result("a" * 40, {small: 20.0, large: 400.0}, {small: 1.001, large: 0.999})
    after = _result("b" * 40, {small: 20.6, large: 401.0}, {small: 1.004, large: 1.000})
    before["compare"]["cases"][skipped] = after["compare"]["cases"][skipped] = {"verdict": "skipped", "ratio": None}
    paths = []
    for name, report in (("before", before), ("after", after)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(report))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--against", *map(str, paths)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    row = next(line for line in lines if line.startswith(small))
    assert "20.00" in row and "20.60" in row and "1.0300" in row and "1.0010" in row and "1.0040" in row
    assert not any(line.startswith(skipped) for line in lines)  # measured by neither tree
    assert any("< 50 us: 1 cases" in line and "beyond 2%: 1" in line for line in lines)
    assert any(">= 50 us: 1 cases" in line and "max 0.25%" in line for line in lines)
