"""scripts/explain_check.py's own logic on the CPU: every plant applies at every magnitude, and
the smoke run builds a plant's real sm_90a cubins (local nvcc) and finds its change in the SASS."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import explain_check  # noqa: E402


def test_every_plant_is_one_line_and_applies_at_every_magnitude(tmp_path):
    plants = explain_check.load_plants()
    assert len(plants) >= 6
    for plant in plants:
        diff = plant.text.split("\n--- a/", 1)[1]
        added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
        assert len(added) == 1, plant.name  # a one-line change, as pull requests make them
        assert plant.variants and plant.magnitudes and plant.expected_cause
        for magnitude in plant.magnitudes:
            root = tmp_path / f"{plant.name}-{magnitude}"
            target = diff.split("\n", 1)[0].strip()
            (root / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / target, root / target)
            explain_check.apply_plant(plant, magnitude, root)
            text = (root / target).read_text()
            assert explain_check.PLACEHOLDER not in text and text != (REPO / target).read_text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the plants' sm_90a cubins")
def test_the_smoke_run_finds_the_barrier_in_the_loop(tmp_path):
    from attnwatch.history.analysis.sass import find_tool

    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not found (PATH, beside Triton, $CUDA_HOME/bin)")
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "explain_check.py"),
            "--device",
            "cpu",
            "--smoke",
            "--plants",
            "barrier,triton_stages",
            "--magnitudes",
            "first",
            "--out",
            str(out),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(out.iterdir())) <= 8
    result = json.loads((out / "explain_check.json").read_text())
    assert result["aa"] == {"skipped": "no GPU (smoke)"}
    rows = {r["plant"]: r for r in result["plants_run"]}
    assert rows["barrier"]["sass"]["describe"].endswith("+1 BAR in a loop")
    assert all(v == {"barrier": 1} for v in rows["barrier"]["sass"]["by_class"].values())
    assert "no cubin" in rows["triton_stages"]["sass"]["error"]  # Triton's cubins come from a GPU run
    table = done.stdout.strip().splitlines()
    assert table[-3].startswith("plant") and "barrier" in table[-2] and " yes " in table[-2]
