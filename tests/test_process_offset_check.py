"""The analysis of scripts/process_offset_check.py (the GPU part runs on the GPU machine)."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "process_offset_check.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("process_offset_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_anova_by_hand(script):
    """Three processes of two rounds: means 1, 2, 3; within deviations +-0.5."""
    result = script.anova([[0.5, 1.5], [1.5, 2.5], [2.5, 3.5]])
    # MSB = 2 * ((1-2)^2 + 0 + (3-2)^2) / 2 = 2; MSW = 6 * 0.25 / 3 = 0.5; F = 4
    assert result["F"] == pytest.approx(4.0)
    assert result["df"] == [2, 3]
    assert result["within_sd_pct"] == pytest.approx(100 * math.sqrt(0.5))
    assert result["between_sd_pct"] == pytest.approx(100 * math.sqrt((2 - 0.5) / 2))


def _processes(arm, offset_sd, rng, subjects):
    out = []
    for _ in range(10):
        offset = rng.gauss(0.0, offset_sd)
        rounds = [
            {
                timing: {name: 20.0 * math.exp(offset + rng.gauss(0.0, 0.002)) for name in subjects}
                for timing in ("event_median_us", "graph_median_us")
            }
            for _ in range(4)
        ]
        out.append({"arm": arm, "rounds": rounds})
    return out


def test_analysis_finds_a_planted_process_offset_and_only_there(script):
    rng = random.Random(3)
    names = list(script.SUBJECTS)
    processes = _processes("free", 0.006, rng, names) + _processes("pool_per_round", 0.0, rng, names)
    result = script.analyse(processes)
    planted = result["free"]["event_median_us"]
    clean = result["pool_per_round"]["event_median_us"]
    for name in names:
        assert planted["subjects"][name]["between_sd_pct"] > 0.3
        assert clean["subjects"][name]["between_sd_pct"] < 0.15
    # the offset is shared by every subject of a process: its mean over subjects tracks it
    assert max(abs(x) for x in planted["process_shared_offset_pct"]) > 0.4
    assert max(abs(x) for x in clean["process_shared_offset_pct"]) < 0.2


def test_the_fixed_flush_arm_keeps_one_flush_buffer_for_the_process_s_life(script):
    """The L2 flush buffer's placement (once scripts/flush_placement_check.py) is an arm here: its
    children are told to keep one buffer, and every other arm's children are not."""
    fixed, _ = script.child_command("fixed_flush", rounds=4, seed=0, pin_cpu=0)
    assert "--fixed-flush" in fixed
    for arm in set(script.ARMS) - {"fixed_flush"}:
        assert "--fixed-flush" not in script.child_command(arm, rounds=4, seed=0, pin_cpu=0)[0]
