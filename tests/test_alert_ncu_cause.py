"""An alert on main shows the counter rules' cause: a real DuckDB history of real bundles whose
ncu counters are the H200's (tests/data/ncu/h200_raw_pr_default.csv), with a barrier planted in
triton_fa2 from the step on (its stall counter ×4 and the kernel 6% slower)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bundle_factory import make_bundle
from attnwatch.cli.main import main
from attnwatch.ci.ncu.parse import parse_ncu_csv
from attnwatch.history.detection.alerts import list_alerts
from attnwatch.history.detection.ncu_cause import alert_causes, cause_of
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
STEP_AT = 10
BARRIER = "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
VARIANTS = ("sdpa", "triton_fa2", "cuda_wmma")


@pytest.fixture(scope="module")
def kernel(fixtures_dir) -> dict[str, float]:
    """The real counters of one kernel launch (cuda_wmma's, b4_h16_s1k) on the H200."""
    report = parse_ncu_csv(fixtures_dir / "ncu" / "h200_raw_pr_default.csv")
    return next(k.metrics for k in report.kernels if k.nvtx_range == "cuda_wmma/b4_h16_s1k/fp16/noncausal")


@pytest.fixture(scope="module")
def history(tmp_path_factory, kernel):
    """One history for the module's read-only tests (16 ingests are the slow part)."""
    tmp_path = tmp_path_factory.mktemp("alerts")
    db_path = tmp_path / "history.duckdb"
    paths = []
    for i in range(16):
        stepped = i >= STEP_AT
        planted = {**kernel, BARRIER: kernel[BARRIER] * 4} if stepped else kernel
        # the ncu pass profiles triton_fa2's cases only: sdpa and cuda_wmma keep the stand-in counters
        counters = {
            f"triton_fa2/{shape}/fp16/{mode}": planted
            for shape in ("l4_mission", "h100_small", "b4_h16_s1k")
            for mode in ("causal", "noncausal")
        }
        paths.append(
            make_bundle(
                tmp_path / f"bundle-{i}",
                run_id=f"run-{i}",
                commit_sha=f"{i:040x}",
                started_at=T0 + timedelta(hours=i),
                commit_date=T0 + timedelta(hours=i),
                gpu_name="NVIDIA H200",
                variants=VARIANTS,
                variant_scale={"triton_fa2": 1.06} if stepped else None,
                seed=i,
                with_ncu=i >= STEP_AT - 2,
                ncu_metrics=counters,
            )
        )
    ingest_paths(parse_location(db_path), paths)
    assert main(["--db", str(db_path), "detect"]) == 0
    return db_path


def test_each_regression_alert_names_the_barrier_and_the_ranked_counters(history):
    alerts = [a for a in list_alerts(parse_location(history), {"limit": 1000}) if a.kind == "regression"]
    assert alerts and {a.case_id.split("/")[0] for a in alerts} == {"triton_fa2"}
    causes = alert_causes(parse_location(history), alerts)
    assert set(causes) == {a.alert_id for a in alerts}  # every step was profiled, and the run before it
    for explanation in causes.values():
        assert explanation.changes[0].rule == "barrier_stalls"
        assert explanation.cause.startswith("warps wait at barriers")


def test_alerts_list_prints_the_cause_under_each_alert(history, capsys):
    capsys.readouterr()
    assert main(["--db", str(history), "alerts", "list", "--kind", "regression"]) == 0
    out = capsys.readouterr().out
    assert out.count("ncu cause: warps wait at barriers") == out.count(" regression ")
    assert "ncu ranked: barrier_stalls 0.19 → 0.76 (+300%)" in out


def test_no_cause_without_a_profile_on_both_sides(history):
    (alert,) = [a for a in list_alerts(parse_location(history), {"limit": 1000}) if a.kind == "regression"][:1]
    assert cause_of(parse_location(history), "correctness", alert.run_id, alert.case_id) is None  # not a speed alert
    assert cause_of(parse_location(history), "regression", "run-3", alert.case_id) is None  # run-3 was not profiled
    assert (
        cause_of(parse_location(history), "regression", "run-8", alert.case_id) is None
    )  # the first profiled run: nothing before it


def test_the_dashboard_draws_the_cause_under_the_alert(history, monkeypatch):
    from test_app_pages import frame_with, open_page, texts

    alert = next(
        a
        for a in list_alerts(parse_location(history), {"limit": 1000})
        if a.kind == "regression" and a.metric == "median_us"
    )
    at = open_page(
        history, monkeypatch, "views/alerts.py", group=f"{STEP_AT - 1:040x}..{STEP_AT:040x}", alert=str(alert.alert_id)
    )
    assert any(m.startswith("**ncu cause:** warps wait at barriers") for m in texts(at, "markdown"))
    rules = frame_with(at, "thresholds")
    assert rules["rule"].iloc[0].startswith("warps wait at barriers") and rules["change"].iloc[0] == pytest.approx(
        300.0
    )


def test_an_opened_alerts_notification_carries_its_cause(history, tmp_path, monkeypatch):
    """`attnwatch detect` announces each new alert with what the profiles say moved (the webhook's
    note), read from the history it just recorded; an alert without profiles keeps its detail."""
    from attnwatch.ci.integration.notify.messages import Transition, payload
    from attnwatch.history.detection.ncu_cause import with_cause

    alerts = [a for a in list_alerts(parse_location(history), {"limit": 1000}) if a.kind == "regression"]
    causes = alert_causes(parse_location(history), alerts)
    alert = alerts[0]
    note = with_cause(alert.detail, causes[alert.alert_id])
    assert note.startswith(alert.detail) and "; cause: warps wait at barriers" in note
    text = payload(Transition.of(alert, "opened", note, "attnwatch detect"), "slack")["text"]
    assert "cause: warps wait at barriers" in text
    assert with_cause(alert.detail, None) == alert.detail


def test_the_kernel_page_reads_the_newest_profile_against_the_one_before(history, monkeypatch):
    """The Kernel page's ncu section: the newest profiled run of the chosen case against the one
    before it, as a stored alert reads it. Both are after the step here (the same counters), so
    the page says nothing exact and nothing beyond noise moved."""
    from test_app_pages import open_page, texts

    from attnwatch.history.analysis.ncu_explain import UNEXPLAINED

    at = open_page(history, monkeypatch, "views/kernel.py", gpu="NVIDIA H200", variant="triton_fa2")
    lines = [m for m in texts(at, "markdown") if m.startswith("**Against the profiled run before")]
    assert lines and UNEXPLAINED.split(":")[0] in lines[0]
