"""`attnwatch run` records each variant's fingerprint in its bundle (format 4), stable between
runs of one checkout, so a step between them is never attributed to code that did not change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _run(out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "run",
            "--device",
            "cpu",
            "--shapes",
            "cpu_tiny",
            "--variants",
            "sdpa,torch_3op",
            "--causal",
            "no",
            "--dtypes",
            "fp16",
            "--no-correctness",
            "--no-progress",
            "--out",
            str(out),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "manifest.json").read_text())


def test_a_run_records_each_variants_code_fingerprint_and_two_runs_agree(tmp_path):
    first, second = _run(tmp_path / "a"), _run(tmp_path / "b")
    assert first["schema_version"] == 4
    prints = first["fingerprints"]
    assert set(prints) == {"sdpa", "torch_3op"}
    assert all(len(p["code"]) == 64 and len(p["digest"]) == 64 and p["unknown"] is None for p in prints.values())
    assert prints["sdpa"]["code"] != prints["torch_3op"]["code"]  # each variant's own code
    assert {v: p["code"] for v, p in second["fingerprints"].items()} == {v: p["code"] for v, p in prints.items()}
    assert len(first["environment"]["harness_digest"]) == 64
    assert first["environment"]["harness_digest"] == second["environment"]["harness_digest"]
