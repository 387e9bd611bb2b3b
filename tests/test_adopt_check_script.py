"""scripts/adopt_check.py on the CPU (Triton's interpreter): the GPU check's own pipeline, so
its one GPU call does not fail on a typo; and a suite that cannot measure fails the check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "adopt_check.py"


def _check(out: Path, device: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--device", device, "--budget-s", "240", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_check_passes_on_the_cpu_with_duckdb_unimportable(tmp_path):
    done = _check(tmp_path, "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "adopt_check.json").read_text())
    assert report["ok"] and {e["case_id"] for e in report["entries"]} == {
        "softmax_triton/4x64/fp32",
        "softmax_torch/4x64/fp32",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adopt_check.json", "bench.json", "pytest.log"]
    assert done.stdout.splitlines()[-2].startswith("softmax_triton/4x64/fp32" + " " * 11 + "cpu_wall")


def test_a_suite_that_cannot_measure_fails_the_check(tmp_path):
    try:
        import torch
    except ImportError:  # pragma: no cover - the dev environment has torch
        pytest.skip("torch is not installed")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cuda would measure")
    done = _check(tmp_path, "cuda")
    assert done.returncode == 1
    assert "without measuring anything" in done.stdout and "pytest exited 4" in done.stdout
    assert "torch sees no CUDA device" in (tmp_path / "pytest.log").read_text()
