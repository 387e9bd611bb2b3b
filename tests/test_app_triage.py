"""Alerts triage: grouped by the commit range that caused them (across GPUs and metrics), labelled
with kind, metric, GPU, case, change and current state, one drawn on its series with the step
and the threshold band, and a whole group acknowledged with one note."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from app_history import H100, H200, OLD_REGRESSED_VARIANT, PUSH_INCORRECT_CASE, build_push_history
from attnwatch.history.detection.alerts import alert_events, list_alerts
from test_app_pages import frame_with, open_page, plotly_specs, texts


@pytest.fixture
def push_history(tmp_path):
    db = tmp_path / "history.duckdb"
    return db, build_push_history(db, tmp_path / "bundles")


def test_alerts_are_grouped_by_the_commit_range_that_caused_them(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/alerts.py")
    groups = frame_with(at, "regressions").set_index("commits")
    old = f"{ids['old_step_base'][:10]}..{ids['old_step_commit'][:10]}"
    new = f"{ids['base_commit'][:10]}..{ids['head_commit'][:10]}"
    assert set(groups.index) == {old, new}
    assert (groups.loc[old, "alerts"], groups.loc[old, "regressions"]) == (16, 16)  # 4 cases x 2 metrics x 2 GPUs
    assert groups.loc[old, "gpus"] == ", ".join(sorted([H100, H200]))
    assert (groups.loc[new, "alerts"], groups.loc[new, "correctness"]) == (1, 1)
    assert groups.loc[old, "statuses"] == "16 open"


def test_labels_say_kind_metric_gpu_case_change_and_state(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/alerts.py", group=f"{ids['old_step_base']}..{ids['old_step_commit']}")
    members = frame_with(at, "label")
    assert len(members) == 16 and set(members["case_id"].str.split("/").str[0]) == {OLD_REGRESSED_VARIANT}
    for row in members.itertuples():
        assert row.label.startswith(f"#{row.alert_id} · regression · ")
        assert f" · {row.gpu} · {row.case_id} · +" in row.label and row.label.endswith(" · open")
        assert ("latency (median_us)" if row.metric == "median_us" else "gap to baseline (gap_to_baseline)") in row.label
        query = {k: v[0] for k, v in parse_qs(row.plot.split("?", 1)[1]).items()}
        assert row.plot.startswith("trends?") and query["gpu"] == row.gpu and query["metric"] == row.metric
        assert query["commits"] == f"{ids['old_step_base']}..{ids['old_step_commit']}"


def test_an_alert_is_drawn_with_its_step_and_the_threshold_band(push_history, monkeypatch):
    db, ids = push_history
    (alert,) = [a for a in list_alerts(db) if a.gpu_name == H200 and a.metric == "median_us"
                and a.case_id == f"{OLD_REGRESSED_VARIANT}/h100_small/fp16/causal"]
    at = open_page(db, monkeypatch, "views/alerts.py", group=f"{ids['old_step_base']}..{ids['old_step_commit']}",
                   alert=str(alert.alert_id))
    assert at.selectbox(key="alerts_alert").value == alert.alert_id
    (spec,) = plotly_specs(at)
    by_name = {t.get("name"): t for t in spec["data"]}
    band = next(t for name, t in by_name.items() if name and name.startswith("threshold band ±2.0%"))
    assert band["y"][0] == pytest.approx(alert.baseline_value * 0.98)
    before = next(t for name, t in by_name.items() if name and name.startswith("before"))
    after = next(t for name, t in by_name.items() if name and name.startswith("after"))
    assert before["y"] == pytest.approx([alert.baseline_value] * 3) and after["y"] == pytest.approx([alert.new_value] * 5)
    assert after["x"][0] == ids["old_step_commit"][:7]  # the step sits at the commit that caused it
    assert len(before["x"]) == 3 and len(after["x"]) == 5
    assert any("min_effect" in c for c in texts(at, "caption"))


def test_a_correctness_alert_shows_the_checks_over_runs(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/alerts.py", group=f"{ids['base_commit']}..{ids['head_commit']}")
    checks = frame_with(at, "worst_max_abs_err")
    assert checks["passed"].tolist()[0] == False  # noqa: E712 (newest first)
    assert frame_with(at, "label")["case_id"].tolist() == [PUSH_INCORRECT_CASE]


def test_one_note_acknowledges_the_whole_group_and_labels_show_it(push_history, monkeypatch):
    db, ids = push_history
    group = f"{ids['old_step_base']}..{ids['old_step_commit']}"
    at = open_page(db, monkeypatch, "views/alerts.py", group=group)
    at.text_area(key="alerts_note").input("cuda_wmma tile change in 03; fixing")
    at.text_input(key="alerts_actor").input("kernel-dev")
    at.button(key="alerts_acknowledge").click().run()
    assert not at.exception
    assert any("16 alert(s) now acknowledged" in s for s in texts(at, "success"))
    stored = [a for a in list_alerts(db) if a.commit_sha == ids["old_step_commit"]]
    assert len(stored) == 16
    assert {(a.status, a.note, a.actor) for a in stored} == {("acknowledged", "cuda_wmma tile change in 03; fixing", "kernel-dev")}
    assert all([e.action for e in alert_events(db, a.alert_id)] == ["opened", "acknowledged"] for a in stored)
    # What the page shows now: the group's state and every label say acknowledged.
    groups = frame_with(at, "regressions").set_index("commits")
    assert groups.loc[f"{ids['old_step_base'][:10]}..{ids['old_step_commit'][:10]}", "statuses"] == "16 acknowledged"
    assert all(label.endswith(" · acknowledged") for label in frame_with(at, "label")["label"])
    assert at.selectbox(key="alerts_group").value == group  # still on the group just triaged
    # The other group is untouched.
    assert next(a for a in list_alerts(db) if a.kind == "correctness").status == "open"
