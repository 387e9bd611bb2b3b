"""Alerts triage: grouped by the commit range that caused them (across GPUs and metrics), the
largest open cause first, labelled with kind, metric, GPU, case, change and current state, one
drawn on its series with the step and the threshold band (its y axis in its unit), and one alert
or, once confirmed, a whole group acknowledged with one note; each group's and alert's form
starts empty."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime
from urllib.parse import parse_qs

import pandas as pd
import pytest

from alert_form import fill, form_key
from app_history import H100, H200, OLD_REGRESSED_VARIANT, PUSH_INCORRECT_CASE, build_push_history
from attnwatch.history.detection.alerts import alert_events, list_alerts
from attnwatch.app.data.triage import groups
from svg_charts import role as _role, svg_images
from test_app_pages import frame_with, open_page, texts
from attnwatch.history.store.location import parse_location


@pytest.fixture
def push_history(tmp_path):
    db = tmp_path / "history.duckdb"
    return db, build_push_history(db, tmp_path / "bundles")


def step_chart(at) -> ET.Element:
    """The Alerts page's step chart (app/step_chart.py), parsed: the page's one SVG image, a data URL."""
    (chart,) = svg_images(at)
    assert chart.get("data-chart") == "step"
    return chart


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
        assert (
            "latency (median_us)" if row.metric == "median_us" else "gap to baseline (gap_to_baseline)"
        ) in row.label
        query = {k: v[0] for k, v in parse_qs(row.plot.split("?", 1)[1]).items()}
        assert row.plot.startswith("trends?") and query["gpu"] == row.gpu and query["metric"] == row.metric
        assert query["commits"] == f"{ids['old_step_base']}..{ids['old_step_commit']}"


def test_an_alert_is_drawn_with_its_step_and_the_threshold_band(push_history, monkeypatch):
    db, ids = push_history
    (alert,) = [
        a
        for a in list_alerts(parse_location(db))
        if a.gpu_name == H200
        and a.metric == "median_us"
        and a.case_id == f"{OLD_REGRESSED_VARIANT}/h100_small/fp16/causal"
    ]
    at = open_page(
        db,
        monkeypatch,
        "views/alerts.py",
        group=f"{ids['old_step_base']}..{ids['old_step_commit']}",
        alert=str(alert.alert_id),
    )
    assert at.selectbox(key="alerts_alert").value == alert.alert_id
    chart = step_chart(at)
    assert "threshold band ±2.0% around before" in "".join(chart.itertext())
    (band,) = _role(chart, "band")
    assert float(band.get("data-low")) == pytest.approx(alert.baseline_value * 0.98, rel=1e-5)
    assert float(band.get("data-high")) == pytest.approx(alert.baseline_value * 1.02, rel=1e-5)
    (before,), (after,) = _role(chart, "before"), _role(chart, "after")
    assert float(before.get("data-value")) == pytest.approx(alert.baseline_value, rel=1e-5)
    assert float(after.get("data-value")) == pytest.approx(alert.new_value, rel=1e-5)
    before_commits, after_commits = (line.get("data-commits").split(",") for line in (before, after))
    assert after_commits[0] == ids["old_step_commit"][:7]  # the step sits at the commit that caused it
    assert len(before_commits) == 3 and len(after_commits) == 5
    (step,) = _role(chart, "step")
    assert step.get("data-commit") == ids["old_step_commit"][:7]
    assert len(_role(chart, "point")) == 8
    assert any("min_effect" in c for c in texts(at, "caption"))


def test_a_correctness_alert_shows_the_checks_over_runs(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/alerts.py", group=f"{ids['base_commit']}..{ids['head_commit']}")
    checks = frame_with(at, "worst_max_abs_err")
    assert checks["passed"].tolist()[0] == False  # noqa: E712 (newest first)
    assert frame_with(at, "label")["case_id"].tolist() == [PUSH_INCORRECT_CASE]


def test_one_note_acknowledges_the_whole_group_once_confirmed_and_labels_show_it(push_history, monkeypatch):
    db, ids = push_history
    group = f"{ids['old_step_base']}..{ids['old_step_commit']}"
    at = open_page(db, monkeypatch, "views/alerts.py", group=group)
    fill(at, "cuda_wmma tile change in 03; fixing", scope="group")
    at.button(key="alerts_acknowledge").click().run()
    assert not at.exception
    # Asked, not written: the whole group waits for a confirmation that names it.
    assert all(a.status == "open" for a in list_alerts(parse_location(db)))
    (question,) = [w for w in texts(at, "warning") if "Acknowledge all 16 alerts" in w]
    assert "cuda_wmma tile change in 03; fixing" in question
    at.button(key="alerts_confirm").click().run()
    assert not at.exception
    assert any("16 alert(s) now acknowledged" in s for s in texts(at, "success"))
    stored = [a for a in list_alerts(parse_location(db)) if a.commit_sha == ids["old_step_commit"]]
    assert len(stored) == 16
    assert {(a.status, a.note, a.actor) for a in stored} == {
        ("acknowledged", "cuda_wmma tile change in 03; fixing", "kernel-dev")
    }
    assert all(
        [e.action for e in alert_events(parse_location(db), a.alert_id)] == ["opened", "acknowledged"] for a in stored
    )
    # What the page shows now: the group's state and every label say acknowledged.
    groups_shown = frame_with(at, "regressions").set_index("commits")
    assert (
        groups_shown.loc[f"{ids['old_step_base'][:10]}..{ids['old_step_commit'][:10]}", "statuses"] == "16 acknowledged"
    )
    assert all(label.endswith(" · acknowledged") for label in frame_with(at, "label")["label"])
    assert at.selectbox(key="alerts_group").value == group  # still on the group just triaged
    assert at.text_area(key=form_key(at, "note")).value == ""  # the form is emptied once written
    # The other group is untouched.
    assert next(a for a in list_alerts(parse_location(db)) if a.kind == "correctness").status == "open"


def test_a_group_change_cancelled_writes_nothing(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/alerts.py", group=f"{ids['old_step_base']}..{ids['old_step_commit']}")
    fill(at, "wrong group", scope="group")
    at.button(key="alerts_resolve").click().run()
    at.button(key="alerts_cancel").click().run()
    assert not at.exception
    assert all(a.status == "open" and not a.note for a in list_alerts(parse_location(db)))
    assert any("Nothing changed" in i for i in texts(at, "info"))
    assert not [b for b in at.button if b.key == "alerts_confirm"]


def test_one_alert_of_a_group_is_acknowledged_alone(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/alerts.py", group=f"{ids['old_step_base']}..{ids['old_step_commit']}")
    chosen = at.selectbox(key="alerts_alert").value
    assert at.radio(key=form_key(at, "scope")).value == "one"  # the alert drawn, unless the group is asked for
    fill(at, "this case only")
    at.button(key="alerts_acknowledge").click().run()
    assert not at.exception
    changed = {a.alert_id: a for a in list_alerts(parse_location(db))}
    assert (changed[chosen].status, changed[chosen].note) == ("acknowledged", "this case only")
    assert [a for a in changed.values() if a.status != "open"] == [changed[chosen]]


def test_the_next_group_and_alert_start_from_an_empty_form(push_history, monkeypatch):
    """After one alert is acknowledged, no other alert's form holds its note: not the next alert
    of the group, not the next group's, not its own once written."""
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/alerts.py", group=f"{ids['old_step_base']}..{ids['old_step_commit']}")
    fill(at, "step in 03: tiles")
    at.button(key="alerts_acknowledge").click().run()
    assert at.text_area(key=form_key(at, "note")).value == ""
    others = [o for o in at.selectbox(key="alerts_alert").options]
    at.selectbox(key="alerts_alert").set_value(int(others[1].split(" · ")[0][1:])).run()
    assert at.text_area(key=form_key(at, "note")).value == ""
    fill(at, "typed, not sent")
    at.selectbox(key="alerts_group").set_value(f"{ids['base_commit']}..{ids['head_commit']}").run()
    assert not at.exception
    note = at.text_area(key=form_key(at, "note"))
    assert note.value == "" and at.text_input(key=form_key(at, "who")).value == ""
    assert [b.label for b in at.button if b.key == "alerts_acknowledge"] == [
        f"Acknowledge #{int(frame_with(at, 'label')['alert_id'][0])}"
    ]


def test_the_list_leads_with_the_largest_open_cause(push_history, monkeypatch):
    """The 16-alert step comes before the newer one-alert correctness failure, and is shown."""
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/alerts.py")
    shown = frame_with(at, "regressions")
    assert shown["commits"].tolist() == [
        f"{ids['old_step_base'][:10]}..{ids['old_step_commit'][:10]}",
        f"{ids['base_commit'][:10]}..{ids['head_commit'][:10]}",
    ]
    assert at.selectbox(key="alerts_group").value == f"{ids['old_step_base']}..{ids['old_step_commit']}"


def _alert(i: int, key: str, change: float, status: str = "open", hours: int = 0) -> dict:
    return {
        "alert_id": i,
        "group_key": key,
        "prev_sha": key.split("..")[0],
        "commit_sha": key.split("..")[1],
        "status": status,
        "kind": "regression" if change > 0 else "improvement",
        "metric": "median_us",
        "gpu": "NVIDIA H200",
        "change_pct": change,
        "commit_message": "m",
        "run_started_at": datetime(2026, 11, 1) + pd.Timedelta(hours=hours),
    }


def test_groups_order_by_open_alerts_then_effect_then_newest():
    step = [_alert(i, "a..b", 8.0 + i / 100, hours=1) for i in range(48)]
    drift = [_alert(100 + i, f"c{i}..d{i}", (-1) ** i * (2.0 + i), hours=10 + i) for i in range(3)]
    resolved = [_alert(200 + i, "e..f", 30.0, status="resolved", hours=50) for i in range(60)]
    tie = [_alert(300, "g..h", 3.0, hours=40)]
    failed = [dict(_alert(400, "i..j", 1.0, hours=60), kind="correctness", metric="correctness", change_pct=None)]
    table = groups(pd.DataFrame(failed + drift + tie + resolved + step))  # newest first, as filtered_alerts gives them
    assert table["group_key"].tolist() == ["a..b", "c2..d2", "g..h", "c1..d1", "c0..d0", "i..j", "e..f"]
    assert table["not_resolved"].tolist() == [48, 1, 1, 1, 1, 1, 0]
    # A correctness failure alone (no change in %) is listed too.
    assert groups(pd.DataFrame(failed))["group_key"].tolist() == ["i..j"]


def test_the_step_chart_names_its_unit_and_timer(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/alerts.py", group=f"{ids['old_step_base']}..{ids['old_step_commit']}")
    titles = set()
    for row in frame_with(at, "label").drop_duplicates("metric").itertuples():
        at.selectbox(key="alerts_alert").set_value(int(row.alert_id)).run()
        (title,) = _role(step_chart(at), "y-title")
        titles.add(title.text)
    assert titles == {"median latency (µs), CUDA events", "gap to baseline (× the baseline's latency), CUDA events"}
