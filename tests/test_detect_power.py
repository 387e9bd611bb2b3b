"""scripts/detection_power.py (and its replay, scripts/compare_replay.py) on the recorded H200 samples (few trials: the full table is in
docs/benchmarks/detection.md). Checks the noise estimate and that the detectors separate 0% from 5%."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "detection_power.py"


@pytest.fixture(scope="module")
def power():
    spec = importlib.util.spec_from_file_location("detection_power", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_between_process_sigma_from_the_fixture(power, fixtures_dir):
    cases = power.load_processes([fixtures_dir / "timing" / "h200_event_samples.json"])
    assert len(cases) == 9 and all(len(p) == 2 for p in cases.values())
    sigma, df = power.between_process_sigma(cases)
    assert df == 9
    assert 0.002 < sigma < 0.006  # 0.37%: per-process medians differ by 0.04-1.2%


def test_wilson_interval(power):
    from power_tables import wilson  # on the path once detection_power is loaded

    low, high = wilson(0, 100)
    assert low == 0 and math.isclose(high, 0.037, abs_tol=0.001)
    low, high = wilson(50, 100)
    assert low < 0.5 < high


def test_small_run_separates_no_change_from_five_percent(power, fixtures_dir, tmp_path, capsys):
    out = tmp_path / "power.json"
    rc = power.main(
        [
            "--samples",
            str(fixtures_dir / "timing" / "h200_event_samples.json"),
            "--trials",
            "3",
            "--resamples",
            "200",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    for design in ("recorded/hierarchical", "recorded/pooled", "per-round/hierarchical", "per-round/pooled"):
        assert data["ab"]["0.00"][design]["any_verdict"] == 0
        assert data["ab"]["0.10"][design]["regression"] == data["ab"]["0.10"][design]["total"] == 27
    # the two-level interval covers the truth far more often when every round is its own process
    per_round = data["ab"]["0.00"]
    assert per_round["per-round/hierarchical"]["covered"] > per_round["per-round/pooled"]["covered"]
    assert data["main"]["0.00"]["estimate"]["any_step"] == 0
    assert data["main"]["0.05"]["estimate"]["detected"] == 27
    assert math.isclose(data["sigma_between_upper95"] / data["sigma_between"], math.sqrt(9 / 2.7), rel_tol=0.01)
    assert "| 5% |" in capsys.readouterr().out


def test_run_bundles_are_processes(power, tmp_path):
    """Bundles (e.g. the rounds of an A/A compare on a GPU) feed the noise model directly."""
    from bundle_factory import make_bundle

    bundles = [
        make_bundle(tmp_path / f"round-{i}", run_id=f"r{i}", variants=("sdpa",), latency_scale=1 + 0.004 * i, seed=i)
        for i in range(4)
    ]
    cases = power.load_processes(bundles)
    assert len(cases) == 4 and all(len(p) == 4 for p in cases.values())  # 2 shapes x 2 causal, 4 processes
    sigma, df = power.between_process_sigma(cases)
    assert df == 12 and 0.002 < sigma < 0.01


RECORDED = Path(__file__).resolve().parent / "data" / "timing" / "h200_event_samples.json"


def test_sequential_rule_on_recorded_noise(power, tmp_path, capsys):
    """compare's sequential rule: no verdict at 0%, every 10% slowdown caught at the first look."""
    out = tmp_path / "seq.json"
    rc = power.main(
        [
            "--samples",
            str(RECORDED),
            "--trials",
            "2",
            "--resamples",
            "300",
            "--sequential",
            "3",
            "5",
            "--only-sequential",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())["sequential"]
    assert data["min_rounds"] == 3 and math.isclose(data["per_look_confidence"], 1 - 0.05 / 3)
    for design in ("recorded", "per-round"):
        assert data["rows"]["0.00"][design]["any_verdict"] == 0
        ten = data["rows"]["0.10"][design]
        assert ten["regression"] == ten["total"] == 18 and ten["rounds"] == 3 * 18
    assert "| 10% |" in capsys.readouterr().out


def test_replay_of_recorded_compares(power, tmp_path, capsys):
    """--compares judges a compare's recorded rounds as they are, head x (1 + slowdown), at the
    first look: a head worker 0.4% slower in every case (a process offset) is no verdict, a 10%
    slowdown on top is a regression in every case, by the verdict rule and the earlier one."""
    folder = three_round_compare(tmp_path / "compare")
    out = tmp_path / "replay.json"
    assert power.main(["--compares", str(folder), "--resamples", "300", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["replay"]["rows"]
    assert rows["0.00"]["total"] == 4 and rows["0.00"]["any_verdict"] == 0
    assert rows["0.10"]["regression"] == rows["0.10"]["earlier_regression"] == 4
    assert "mean head/base offset +0.4" in capsys.readouterr().out


def test_replay_with_shorter_rounds_keeps_each_round_s_first_samples(power, tmp_path, capsys):
    """--round-fractions replays the same rounds cut to their first samples (a shorter per-round
    cap): the calls kept shrink with the fraction, the verdicts are judged again on what is left."""
    import numpy as np

    from compare_replay import shortened  # on the path once detection_power is loaded

    timed = np.arange(1.0, 201.0)
    assert shortened([timed], 0.25)[0].tolist() == timed[:50].tolist()
    assert len(shortened([timed], 0.01)[0]) == 10  # never fewer than 10 samples a round
    folder = three_round_compare(tmp_path / "compare")
    out = tmp_path / "replay.json"
    args = ["--compares", str(folder), "--resamples", "300", "--json", str(out)]
    assert power.main([*args, "--round-fractions", "1,0.25"]) == 0
    by_fraction = json.loads(out.read_text())["replay_by_fraction"]
    assert set(by_fraction) == {"1", "0.25"}
    assert by_fraction["0.25"]["calls"] * 4 == by_fraction["1"]["calls"]
    assert by_fraction["0.25"]["rows"]["0.10"]["regression"] == 4
    assert "each round cut to its first 25% of samples" in capsys.readouterr().out
    assert power.main([*args, "--round-fractions", "0,1.5"]) == 2
    assert "--round-fractions: expected numbers in (0, 1]" in capsys.readouterr().err


def three_round_compare(folder: Path) -> Path:
    """A compare's `--out` folder of three rounds a side of `sdpa`, 200 samples a round, the head's
    worker 0.4% slower in every case (a process offset), every round a little slower than the last."""
    from bundle_factory import make_bundle

    for k in range(1, 4):
        for side, scale in (("base", 1.0), ("head", 1.004)):
            make_bundle(
                folder / "bundles" / f"{side}-round{k}",
                run_id=f"{side}{k}",
                variants=("sdpa",),
                latency_scale=scale * (1 + 0.001 * k),
                n_samples=200,
                seed=10 * k + (side == "head"),
            )
    return folder
