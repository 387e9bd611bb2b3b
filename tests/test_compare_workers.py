"""A compare side's warm worker when cases crash (ci/compare/side.py), and a whole compare
through `attnwatch compare --base-root` on this CPU: two warm workers, rounds alternating,
a planted slowdown caught, and each case measured only until its verdict is decided."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnwatch.ci.attribution import ATTRIBUTED, UNKNOWN_ORIGIN
from attnwatch.ci.compare.report import load_report
from attnwatch.ci.compare.rounds import read_round
from attnwatch.ci.compare.side import Side
from attnwatch.ci.plan import RunPlan, plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.ci.workers.client import WorkerSpec
from attnwatch.kernels.shapes import SHAPES

pytestmark = pytest.mark.slow  # worker processes and their isolated re-runs

FAULTS = str(Path(__file__).resolve().parent / "fault_variants")
REPO_ROOT = Path(__file__).resolve().parent.parent


def _side(tmp_path, variants: list[str], case_timeout_s: float = 60.0) -> tuple[Side, list]:
    cases = plan_cases(variants, [SHAPES["cpu_tiny"]], ["fp16"], [False])
    timing = timing_config("cpu").with_overrides(min_samples=6, max_samples=12, time_cap_s=0.2)
    plan = RunPlan(
        cases=cases,
        timing=timing.to_dict(),
        device_kind="cpu",
        correctness=False,
        extra_variant_modules=["attnwatch_fault_variants"],
    )
    spec = WorkerSpec(
        plan=plan,
        side="head",
        checkout=None,
        work_dir=tmp_path / "work",
        extra_sys_path=[FAULTS],
        startup_timeout_s=120.0,
        case_timeout_s=case_timeout_s,
    )
    return Side("head", spec, log=lambda m: None), cases


def _status(records) -> dict[str, tuple[str, str]]:
    return {cid.split("/")[0]: (r.status, r.error or "") for cid, r in records.items()}


def test_worker_crash_retries_only_the_case_in_flight_once(tmp_path, monkeypatch):
    """t_crash_once kills the worker once: the side starts a fresh worker, t_crash_once is
    re-run alone (passes), measured again, and the crash is a note, not an outcome."""
    monkeypatch.setenv("ATTNWATCH_TEST_MARKER_DIR", str(tmp_path))
    side, cases = _side(tmp_path, ["t_ok", "t_crash_once", "t_slow", "t_built"])
    try:
        first = side.measure(cases, 0, {})
        second = side.measure(cases, 1, {})
    finally:
        side.close()
    assert {v for v, _ in _status(first).values()} == {"ok"} and {v for v, _ in _status(second).values()} == {"ok"}
    assert side.restarts == 1 and side.times.workers_started == 2 and side.attribution.probes == 1
    # each worker built t_built (a 0.3 s build), and the side's build time says which variant it went to
    assert set(side.times.build_by_variant) == {"t_built"}
    assert 2 * 0.3 <= side.times.build_by_variant["t_built"] <= side.times.build_s
    assert len(side.attribution.notes) == 1 and side.attribution.notes[0].startswith(UNKNOWN_ORIGIN)
    assert "t_crash_once" in side.attribution.notes[0] and not side.final


def test_a_case_that_crashes_alone_is_lost_for_the_side_and_not_asked_again(tmp_path):
    side, cases = _side(tmp_path, ["t_ok", "t_poison"])
    try:
        first = side.measure(cases, 0, {})
        second = side.measure(cases, 1, {})
    finally:
        side.close()
    status = _status(first)
    assert status["t_ok"][0] == "ok"
    assert status["t_poison"][0] == "crashed" and status["t_poison"][1].startswith(ATTRIBUTED)
    assert _status(second)["t_poison"] == status["t_poison"]  # the side's final record, not a new try
    assert side.times.workers_started == 2 and side.restarts == 1  # no worker was spent on it in round 2


def test_a_hang_is_a_timeout_without_a_retry(tmp_path):
    side, cases = _side(tmp_path, ["t_ok", "t_hang"], case_timeout_s=3.0)
    try:
        records = side.measure(cases, 0, {})
    finally:
        side.close()
    status = _status(records)
    assert status["t_ok"][0] == "ok"
    assert status["t_hang"][0] == "timeout" and "no sign of life for 3 s" in status["t_hang"][1]
    assert side.attribution.probes == 0


def test_compare_with_two_warm_workers_catches_a_planted_slowdown(tmp_path):
    """The head's t_planted is sdpa plus 300% extra work (tests/fault_variants/
    attnwatch_planted.py; that large because a shared CI CPU's rounds can differ by 2x); the
    compare keeps one worker per side for all rounds, alternates them ABBA, stops the planted
    case once its regression is decided, and records why; its log says which variant each side's
    build time went to (t_built, a 0.3 s build). (A subprocess: the variant module
    registers t_planted in whatever process imports it.)"""
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "compare",
            "--base-root",
            str(REPO_ROOT),
            "--base",
            "same-tree",
            "--shapes",
            "cpu",
            "--variants",
            "sdpa,t_planted,t_built",
            "--causal",
            "no",
            "--min-rounds",
            "3",
            "--rounds",
            "5",
            "--variant-module",
            "attnwatch_planted",
            "--variant-module",
            "attnwatch_fault_variants",
            "--variant-path",
            FAULTS,
            "--no-correctness",
            "--out",
            str(out),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "ATTNWATCH_PLANTED_SLOWDOWN": "3.0"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = load_report(out / "compare.json")
    by_variant = {c.variant: c for c in report.cases}
    planted = by_variant["t_planted"]
    # +300% planted; the CPU busy-wait is sized from one calibration median, and a shared CI
    # machine's load can differ by 2x between that calibration and the rounds (6.0 was seen)
    assert planted.verdict == "regression" and 2.0 < planted.ratio < 8.0
    session = json.loads((out / "session.json").read_text())
    assert session["decided"][planted.case_id] == "regression"
    # stopped at a look before the last round: the first (3 rounds) on a quiet machine; a loaded
    # CPU's round-to-round spread can leave the first look undecided, never all five
    used = session["rounds_used"][planted.case_id]
    assert 3 <= used < 5 and used == len(planted.base.round_medians_us)
    assert [s["times"]["workers_started"] for s in session["sides"].values()] == [1, 1]
    schedule = [tuple(entry[:2]) for entry in session["schedule"]]
    assert schedule[:4] == [("base", 1), ("head", 1), ("head", 2), ("base", 2)]
    assert (
        session["sides"]["base"]["kernels_path"]
        == session["sides"]["head"]["kernels_path"]
        == str((REPO_ROOT / "kernels").resolve())  # the folder itself, attnwatch/kernels
    )
    # Every round each side ran is a bundle; the decided case is only in the rounds it was measured in.
    bundles = {side: [read_round(out / p) for p in s["bundles"]] for side, s in session["sides"].items()}
    assert [len(b) for b in bundles.values()] == [session["rounds_run"]] * 2
    assert [planted.case_id in rd.cases for rd in bundles["head"]] == [k < used for k in range(session["rounds_run"])]
    assert any("sequential: 3 to 5 rounds per case" in n for n in report.notes)
    assert "compare: base: start-up" in done.stderr and "timing" in done.stderr
    for name, side in session["sides"].items():  # which variant each side's build time went to (t_built: 0.3 s)
        assert (
            set(side["times"]["build_by_variant"]) == {"t_built"}
            and side["times"]["build_by_variant"]["t_built"] >= 0.3
        )
        assert f"compare: {name}: builds by variant (s): t_built 0." in done.stderr


def test_two_workers_per_side_take_the_rounds_in_turn(tmp_path):
    """--workers-per-side 2: round r is measured by worker r mod 2 of each side (each its own
    process, so the rounds' spread contains the workers' offsets); only the first worker of a
    side checks correctness; a real compare of sdpa on the CPU still decides."""
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "compare",
            "--base-root",
            str(REPO_ROOT),
            "--base",
            "same-tree",
            "--shapes",
            "cpu",
            "--variants",
            "sdpa",
            "--causal",
            "no",
            "--min-rounds",
            "2",
            "--rounds",
            "2",
            "--workers-per-side",
            "2",
            "--all",  # every head variant checked for correctness (a selecting compare checks changed ones only)
            "--out",
            str(out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    session = json.loads((out / "session.json").read_text())
    assert session["workers_per_side"] == 2
    assert [s["times"]["workers_started"] for s in session["sides"].values()] == [2, 2]
    for times in (s["times"] for s in session["sides"].values()):  # both workers' warm-up, by variant
        assert sum(times["warmup_by_variant"].values()) == pytest.approx(times["warmup_s"])
    for side in ("base", "head"):
        logs = sorted(p.name for p in (out / "workers" / side).glob("*.log"))
        assert logs == [f"{side}-0.log", f"{side}.2-0.log"], logs
        assert session["sides"][side]["rounds_by_worker"] == [side, f"{side}.2"]
    bundles = {side: [read_round(out / p) for p in s["bundles"]] for side, s in session["sides"].items()}
    checked = [[rec.correct is not None for rec in rd.cases.values()] for rd in bundles["head"]]
    assert checked == [[True], [False]]  # round 1 (first worker) checked correctness, round 2 (second) did not
