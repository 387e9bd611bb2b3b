"""scripts/published_check.py on the recorded H100 inputs (tests/data/README.md): its table and
summary against figures computed here by hand, and its one-line refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "published_check.py"
H100 = "NVIDIA H100 80GB HBM3"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def h100_inputs(fixtures_dir, tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("published")
    with tarfile.open(fixtures_dir / "bundles" / "h100-fa-grid-fp16-8131799.tgz") as tar:
        tar.extractall(out, filter="data")
    return fixtures_dir / "power_check" / "h100-2026-11-26-8131799.json", out / "fa4_h100_fa_grid_fp16"


def row_of(stdout: str, case_id: str) -> list[str]:
    return next(line.split() for line in stdout.splitlines() if line.startswith(case_id + " "))


def test_h100_table_matches_hand_computed_cases(h100_inputs, fixtures_dir, tmp_path):
    power, _ = h100_inputs
    packed = fixtures_dir / "bundles" / "h100-fa-grid-fp16-8131799.tgz"  # the bundle as kept, unpacked by the script
    proc = run("--gpu", H100, str(power), str(packed), "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["columns"] == ["plain", "paced_duty", "paced_power", "run plain"]
    assert "2024 table measured on an H100 80GB SXM5" in proc.stdout and f"Ours: {H100}." in proc.stdout

    # sdpa_cudnn/fa_s16384_d128 causal: B=1, H=16, S=16384, D=128 -> 4*1*16*16384^2*128 / 2 = 2^40
    # FLOPs; paced_duty's three process medians 1789.104, 1790.432, 1787.232 us -> median 1789.104.
    # Published cuDNN, head dim 128, causal, 16k: 539.
    paced = 2**40 / 1789.1039848327637e-6 / 1e12  # 614.56 TFLOPS
    rows = {r["case_id"]: r for r in result["rows"]}
    cudnn = rows["sdpa_cudnn/fa_s16384_d128/fp16/causal"]
    assert cudnn["implementation"] == "cuDNN" and cudnn["published_tflops"] == 539
    assert cudnn["ours"]["paced_duty"]["tflops"] == pytest.approx(paced, rel=1e-9)
    assert cudnn["ours"]["paced_duty"]["ratio"] == pytest.approx(paced / 539, rel=1e-9)
    assert cudnn["ours"]["paced_duty"]["processes"] == 3
    # The first process ran out of time before this case's plain round: two medians, and said so.
    assert cudnn["ours"]["plain"]["processes"] == 2
    assert "plain: sdpa_cudnn/fa_s16384_d128/fp16/causal from 2 of 3 processes" in proc.stdout.splitlines()
    line = row_of(proc.stdout, "sdpa_cudnn/fa_s16384_d128/fp16/causal")
    assert line[1:3] == ["cuDNN", "539"] and line[5:7] == ["614.6", "1.140"]  # plain, then paced_duty

    # fa4_sm90/fa_s16384_d128 non-causal from the bundle: 2^41 FLOPs over its median 3285.216 us;
    # published FlashAttention-3, head dim 128, non-causal, 16k: 648.
    run_plain = 2**41 / 3285.215973854065e-6 / 1e12  # 669.37 TFLOPS
    fa3 = rows["fa4_sm90/fa_s16384_d128/fp16/noncausal"]
    assert fa3["implementation"] == "FlashAttention-3" and set(fa3["ours"]) == {"run plain"}
    assert fa3["ours"]["run plain"]["ratio"] == pytest.approx(run_plain / 648, rel=1e-9)
    assert row_of(proc.stdout, "fa4_sm90/fa_s16384_d128/fp16/noncausal")[-2:] == ["669.4", "1.033"]

    # The paper's Triton is not our kernel: printed, marked, never counted.
    triton = rows["triton_fa2/fa_s16384_d128/fp16/noncausal"]
    assert not triton["comparable"] and row_of(proc.stdout, triton["case_id"])[2] == "*"
    summary = result["summary"]["paced_duty"]
    assert summary["all"]["cases"] == 28 and set(summary) == {"all", "cuDNN", "FlashAttention-2"}
    assert summary["all"]["within"] + summary["all"]["above"] + summary["all"]["below"] == 28
    assert summary["all"]["within"] == sum(
        1
        for r in result["rows"]
        if r["comparable"] and "paced_duty" in r["ours"] and abs(r["ours"]["paced_duty"]["ratio"] - 1) <= 0.10
    )
    assert proc.stdout.strip().splitlines()[-1].startswith("run plain ")  # the summary is printed last


def test_refusals_are_one_line_naming_file_and_field(h100_inputs, fixtures_dir, tmp_path):
    power, bundle = h100_inputs
    no_gpu = run(str(power))
    assert no_gpu.returncode == 2 and no_gpu.stderr.count("\n") == 1
    assert f"{power}: gpu_name: the file names no GPU; pass --gpu" in no_gpu.stderr

    h200 = fixtures_dir / "power_check" / "h200-2026-11-26-86302dc.json"
    mixed = run("--gpu", "NVIDIA H200", str(h200), str(bundle))
    assert mixed.returncode == 2 and "compare one GPU per call" in mixed.stderr

    bad_model = json.loads(power.read_text())
    bad_model["cases"]["plain|sdpa_flash/fa_s4096_d64/fp16/causal"]["tflops"][0] *= 1.5  # another FLOP model
    (tmp_path / "p.json").write_text(json.dumps(bad_model))
    proc = run("--gpu", H100, str(tmp_path / "p.json"))
    assert proc.returncode == 2
    assert "cases['plain|sdpa_flash/fa_s4096_d64/fp16/causal'].tflops" in proc.stderr and "FLOP model" in proc.stderr

    table = (ROOT / "docs" / "data" / "published_fa3_h100.toml").read_text()
    short = table.replace("tflops = [282, 306, 318, 321, 322, 324]", "tflops = [282, 306, 318, 321, 322]")
    (tmp_path / "t.toml").write_text(short)
    proc = run("--gpu", H100, "--table", str(tmp_path / "t.toml"), str(power))
    assert proc.returncode == 2 and f"{tmp_path / 't.toml'}: series[0].tflops: needs 6" in proc.stderr
