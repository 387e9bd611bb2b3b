"""The timing guard reported per case: engine attribution, CaseTiming, summary, history column.

`CudaEventTimer` keeps one `GuardPolicy` per timer, with one guard per subject; its counters are
attributed to the subject whose block was being timed. Here a fake timer drives the real `GuardPolicy` with a scripted
coverage outcome per block (no GPU needed), exactly as `CudaEventTimer.time_block` does.
"""

from __future__ import annotations

import json

import pytest

from attnwatch.ci.run_config import timing_config
from attnwatch.ci.plan import PlannedCase
from attnwatch.ci.timing.derived import case_timing
from attnwatch.ci.timing.sampler import Subject, measure_interleaved
from attnwatch.ci.timing.gpu_state import NullMonitor
from attnwatch.ci.timing.timers import CpuWallTimer, GuardPolicy, NoFlush
from attnwatch.history.contract.bundle import CaseTiming
from attnwatch.history.errors import BundleError
from attnwatch.history.contract.timings import parse_case_timing
from attnwatch.history.store.location import parse_location


class ScriptedGuardTimer:
    """Times nothing; replays, per subject, whether each attempt's guard covered the enqueue."""

    mode = "cuda_events"

    def __init__(self, coverage: dict[str, list[bool]], policy: GuardPolicy) -> None:
        self.coverage = {k: list(v) for k, v in coverage.items()}
        self.policy = policy

    def time_block(self, fn, calls, flusher, key=None):
        assert key == fn()  # the engine names the subject whose guard this block uses
        attempt = 0
        while True:
            covered = self.coverage[key].pop(0) if self.coverage[key] else True
            if not self.policy.after_block(covered, enqueue_us=5000.0, attempt=attempt, key=key):
                return [10.0] * calls
            attempt += 1

    def synchronize(self):
        return None


def _config(**changes):
    return timing_config("cuda").with_overrides(
        **{"time_cap_s": 60.0, "min_samples": 20, "max_samples": 40, "block_calls": 10, **changes}
    )


def test_guard_counts_are_attributed_to_the_subject_whose_block_it_was():
    # 4 blocks per subject (40 samples / 10). "a": one block re-timed once then covered;
    # "b": one block never covered (3 attempts: 2 re-timings, then kept uncovered); "c": clean.
    coverage = {"a": [False, True], "b": [False, False, False], "c": []}
    policy = GuardPolicy(max_attempts=3)
    timer = ScriptedGuardTimer(coverage, policy)
    subjects = [Subject(k, (lambda k=k: k)) for k in ("a", "b", "c")]
    config = _config(target_rel_spread=-1.0)  # never converges: every subject takes 4 blocks
    raws = measure_interleaved(subjects, config, timer, NoFlush(), NullMonitor())
    assert {k: (r.guard_retimed_blocks, r.guard_uncovered_blocks) for k, r in raws.items()} == {
        "a": (1, 0),
        "b": (2, 1),
        "c": (0, 0),
    }
    assert policy.retimed_blocks == 3 and policy.uncovered_blocks == 1  # the timer's totals
    assert all(len(r.samples_us) == 40 for r in raws.values())


def test_no_guard_on_a_cpu_timer_reads_none_not_zero():
    raws = measure_interleaved(
        [Subject("cpu", lambda: sum(range(10)))],
        _config(min_samples=10, max_samples=20),
        CpuWallTimer(),
        NoFlush(),
        NullMonitor(),
    )
    assert raws["cpu"].guard_retimed_blocks is None and raws["cpu"].guard_uncovered_blocks is None


def test_case_timing_carries_the_guard_counts_through_the_bundle_contract():
    timer = ScriptedGuardTimer({"k": [False, False, False, False]}, GuardPolicy(max_attempts=4))
    raw = measure_interleaved(
        [Subject("k", lambda: "k")], _config(min_samples=10, max_samples=10), timer, NoFlush(), NullMonitor()
    )["k"]
    dims = PlannedCase("sdpa", "h100_small", 1, 16, 1024, 64, "fp16", False)
    timing = case_timing(dims, raw, "g#1")
    assert (timing.guard_retimed_blocks, timing.guard_uncovered_blocks) == (3, 1)
    # What the history's validator reads back from timings.json.
    data = json.loads(json.dumps(timing.__dict__))
    parsed = parse_case_timing(data, "timings.json", "timings[0]")
    assert isinstance(parsed, CaseTiming) and parsed.guard_uncovered_blocks == 1
    # An older bundle without the fields still validates, as "no guard information".
    for name in ("guard_retimed_blocks", "guard_uncovered_blocks"):
        data.pop(name)
    assert parse_case_timing(data, "timings.json", "x").guard_uncovered_blocks is None
    data["guard_uncovered_blocks"] = -1
    with pytest.raises(BundleError, match="guard_uncovered_blocks"):
        parse_case_timing(data, "timings.json", "x")


def test_summary_warns_about_uncovered_blocks():
    from attnwatch.ci.plan import plan_cases
    from attnwatch.ci.suite_state import SuiteState
    from attnwatch.ci.summary import format_summary
    from attnwatch.kernels.shapes import SHAPES

    state = SuiteState(plan_cases(["sdpa", "cuda_wmma"], [SHAPES["h100_small"]], ["fp16"], [False]))
    for cid, uncovered in (("sdpa/h100_small/fp16/noncausal", 0), ("cuda_wmma/h100_small/fp16/noncausal", 3)):
        timing = {
            "case_id": cid,
            "median_us": 17.0,
            "tflops": 1.0,
            "gap_to_baseline": 1.0,
            "converged": True,
            "rel_spread": 0.01,
            "throttled_samples": 0,
            "throttle_reasons": [],
            "guard_retimed_blocks": 5,
            "guard_uncovered_blocks": uncovered,
        }
        state.apply({"kind": "result", "case": cid, "status": "ok", "timing": timing, "samples_us": [17.0]})
        state.apply({"kind": "outcome", "case": cid, "status": "ok"})
    text = format_summary(state, "cuda_events")
    assert (
        "WARNING: 1 cases kept 3 blocks the guard kernel did not cover (samples possibly containing host "
        "gaps; most: cuda_wmma/h100_small/fp16/noncausal, 3 blocks)"
    ) in text
    # Re-timed blocks alone are the guard working: no warning.
    state.timings["cuda_wmma/h100_small/fp16/noncausal"]["guard_uncovered_blocks"] = 0
    assert "guard kernel" not in format_summary(state, "cuda_events")


def test_guard_counts_land_in_the_history(tmp_path, db_path):
    from bundle_factory import make_bundle
    from attnwatch.history.store.db import open_read
    from attnwatch.history.ingest.write import ingest_paths

    bundle = make_bundle(tmp_path / "b", variants=("sdpa", "triton_fa2"), n_samples=20)
    path = bundle / "timings.json"
    document = json.loads(path.read_text())
    for i, timing in enumerate(document["timings"]):
        if timing["variant"] == "triton_fa2":
            timing["guard_retimed_blocks"], timing["guard_uncovered_blocks"] = 4, i
    path.write_text(json.dumps(document))
    ingest_paths(parse_location(db_path), [bundle])
    with open_read(parse_location(db_path)) as con:
        rows = con.execute(
            "SELECT variant, guard_retimed_blocks, guard_uncovered_blocks FROM result_details "
            "WHERE status = 'ok' ORDER BY case_id"
        ).fetchall()
    expected = list(enumerate(document["timings"]))
    assert len(rows) == len(expected) == 8
    for variant, retimed, uncovered in rows:
        if variant == "sdpa":
            assert retimed is None and uncovered is None  # no guard information: NULL, not 0
        else:
            assert retimed == 4
    assert sorted(r[2] for r in rows if r[0] == "triton_fa2") == sorted(
        i for i, t in expected if t["variant"] == "triton_fa2"
    )


def test_migration_004_adds_the_columns_to_a_history_at_version_3(tmp_path, db_path):
    import shutil

    import duckdb

    from attnwatch.history.store.migrations import MIGRATIONS_DIR, migrate

    early = tmp_path / "migrations"
    early.mkdir()
    for name in ("001_initial.sql", "002_alert_events.sql", "003_ncu_roofline.sql"):
        shutil.copy(MIGRATIONS_DIR / name, early / name)
    con = duckdb.connect(str(db_path))
    try:
        assert migrate(con, str(db_path), early) == [1, 2, 3]
        con.execute(
            "INSERT INTO results (run_id, case_id, variant, status) VALUES ('old', 'sdpa/x/fp16/causal', 'sdpa', 'ok')"
        )
        assert 4 in migrate(con, str(db_path))
        row = con.execute(
            "SELECT guard_retimed_blocks, guard_uncovered_blocks FROM results WHERE run_id = 'old'"
        ).fetchone()
        types = dict(
            con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = 'results' AND column_name LIKE 'guard_%'"
            ).fetchall()
        )
    finally:
        con.close()
    assert row == (None, None)  # a run recorded before the guard existed: unknown, not zero
    assert types == {"guard_retimed_blocks": "INTEGER", "guard_uncovered_blocks": "INTEGER"}


def test_gpu_check_reports_guard_totals_per_run_and_none_for_cpu_timing():
    from attnwatch.scripts.gpu_check import guard_totals

    timings = {
        "a": {"guard_retimed_blocks": 2, "guard_uncovered_blocks": 1},
        "b": {"guard_retimed_blocks": 3, "guard_uncovered_blocks": 0},
    }
    assert guard_totals(timings) == {
        "retimed_blocks": 5,
        "uncovered_blocks": 1,
        "cases_with_uncovered_blocks": {"a": 1},
    }
    assert guard_totals({"cpu": {"guard_retimed_blocks": None, "guard_uncovered_blocks": None}}) is None
