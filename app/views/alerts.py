"""Alerts: what detection recorded, grouped by the commit range that caused it. Pick a group to see
its alerts (each labelled with kind, metric, GPU, case, change and current state) and one of them
drawn on its series with the step and the threshold band, and the counter rules' cause where
its run and an earlier one were profiled; acknowledge or resolve the whole group
with one note. Changes go through history.detection.alerts (one transaction for the group, retried while
an ingest holds the file), so neither side loses anything."""

import pandas as pd
import streamlit as st

from attnwatch.app import charts, ui
from attnwatch.app.data import alerts, triage
from attnwatch.app.url_state import UrlState
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.errors import HistoryError
from attnwatch.history.links import case_trend_query, relative

# Both tables put what a reader acts on first, sized to fit a 1440 px screen; the rest follows.
GROUP_COLUMNS = {
    "commits": st.column_config.TextColumn("commit range", width=175),
    "alerts": st.column_config.NumberColumn("alerts", width=55),
    "regressions": st.column_config.NumberColumn("regr.", width=50, help="regression alerts"),
    "improvements": st.column_config.NumberColumn("impr.", width=50, help="improvement alerts"),
    "correctness": st.column_config.NumberColumn("correct.", width=62, help="correctness alerts"),
    "largest_change_pct": st.column_config.NumberColumn("largest change", format="%+.1f%%", width=100),
    "gpus": st.column_config.TextColumn("devices", width=140),
    "statuses": st.column_config.TextColumn("statuses", width=130),
    "metrics": st.column_config.TextColumn("metrics", width=160),
    "commit_message": st.column_config.TextColumn("commit message"),
    "newest_run": st.column_config.DatetimeColumn("step run started"),
}
ALERT_COLUMNS = {
    "alert_id": st.column_config.NumberColumn("id", format="%d", width=45),
    "status": st.column_config.TextColumn("status", width=95),
    "kind": st.column_config.TextColumn("kind", width=85),
    "metric": st.column_config.TextColumn("metric", width=105),
    "case_id": st.column_config.TextColumn("case", width=245),
    "change_pct": st.column_config.NumberColumn("change", format="%+.1f%%", width=72),
    "baseline_value": st.column_config.NumberColumn("before", format="%.4g", width=68),
    "new_value": st.column_config.NumberColumn("after", format="%.4g", width=68),
    "plot": st.column_config.LinkColumn("plot", display_text="open on Trends", width=115),
    "gpu": st.column_config.TextColumn("device"),
    "label": st.column_config.TextColumn("alert"),
    "moved": st.column_config.TextColumn("what moved", width=260,
                                         help="what changed across the step: code (the variant's fingerprint), "
                                              "configuration, environment, machine, or none (noise suspect)"),
}
ALERT_ORDER = ["alert_id", "status", "kind", "metric", "case_id", "change_pct", "baseline_value", "new_value", "plot", "moved", "gpu",
               "label", "note", "actor", "updated_at", "detail"]
ALL_GPUS = "(all)"
NCU_RULE_COLUMNS = {
    "rule": st.column_config.TextColumn("counter rule (history/analysis/ncu_rules.toml)"),
    "base": st.column_config.NumberColumn("before", format="%.4g"),
    "head": st.column_config.NumberColumn("after", format="%.4g"),
    "change": st.column_config.NumberColumn("change", format="%+.1f%%"),
    "thresholds": st.column_config.NumberColumn("thresholds moved", format="%.1f",
                                                help="the change over the rule's threshold; rules are ranked by it"),
}


def filters(source, url: UrlState):
    cols = st.columns([2, 2, 2, 3])
    url.many("alerts_status", "status", alerts.STATUSES, ["open", "acknowledged"])
    statuses = cols[0].multiselect("status", alerts.STATUSES, key="alerts_status")
    url.many("alerts_kind", "kind", alerts.KINDS, list(alerts.KINDS))
    kinds = cols[1].multiselect("kind", alerts.KINDS, key="alerts_kind")
    gpus = [ALL_GPUS, *alerts.alert_gpus(source)]
    url.choice("alerts_gpu", "gpu", gpus, ALL_GPUS)
    gpu = cols[2].selectbox("GPU", gpus, key="alerts_gpu")
    url.text("alerts_case", "case")
    case = cols[3].text_input("case id contains", key="alerts_case", max_chars=200)
    return tuple(statuses), tuple(kinds), None if gpu == ALL_GPUS else gpu, case.strip()


def alerts_page(source, shape):
    url = UrlState()
    show_last_change(source)
    statuses, kinds, gpu, case = filters(source, url)  # gpu None: every GPU
    found = triage.filtered_alerts(source, statuses, kinds, gpu)
    if case:
        found = found[found["case_id"].str.contains(case, regex=False)]
    table = triage.groups(found)
    if table.empty:
        url.publish(gpu=gpu, group=None, alert=None)
        st.success("No alerts match these filters.")
        return
    st.subheader(f"{len(found)} alert(s) in {len(table)} commit range(s)")
    ui.table(table.drop(columns=["group_key"]), hide_index=True, column_config=GROUP_COLUMNS, width="stretch",
                 key="alerts_groups", column_order=list(GROUP_COLUMNS))
    keys = table["group_key"].tolist()
    labels = {r.group_key: triage.group_label(r) for r in table.itertuples()}
    ignored = url.choice("alerts_group", "group", keys, keys[0])
    if ignored:
        st.warning(f"The link names commit range {ui.md(ignored[0])}, which has no alert matching these filters.")
    key = st.selectbox("commit range", keys, format_func=labels.get, key="alerts_group")
    members = found[found["group_key"] == key]
    show_group(source, members, key, url)
    url.publish(gpu=gpu)


def show_group(source, members, key, url: UrlState) -> None:
    first = members.iloc[0]
    st.markdown(f"**{ui.md(triage.short_range(first.prev_sha, first.commit_sha))}** · commit message:")
    st.text(ui.truncate(first.commit_message, 200) or "(no message stored)")
    view = members.assign(plot=[_trend_link(r) for r in members.itertuples()])
    ui.table(view[ALERT_ORDER], hide_index=True, column_config=ALERT_COLUMNS, width="stretch", key="alerts_members")
    ids = [int(a) for a in members["alert_id"]]
    names = {int(r.alert_id): r.label for r in members.itertuples()}
    url.choice("alerts_alert", "alert", ids, ids[0], decode=lambda t: int(t) if t.isdigit() else None)
    chosen = st.selectbox("alert drawn on its series", ids, format_func=names.get, key="alerts_alert")
    draw_alert(source, members[members["alert_id"] == chosen].iloc[0])
    action_form(source, members)


def _trend_link(row) -> str | None:
    metric = row.metric if row.metric in triage.SERIES_METRICS else "median_us"
    query = case_trend_query(row.gpu, row.case_id, metric=metric, commits=f"{row.prev_sha or ''}..{row.commit_sha or ''}",
                             host=_pool(row))
    return relative("trends", query) if query else None


def _pool(row) -> str | None:
    """The pool of the series the alert was found in (None: an alert from before pools)."""
    return None if pd.isna(row.pool) else str(row.pool)


def draw_alert(source, alert) -> None:
    """The step on its series: values, the levels before and after, and the threshold band."""
    if alert.metric not in triage.SERIES_METRICS:
        st.caption(f"Correctness of {ui.md(alert.case_id)} on {ui.md(alert.gpu)} over the newest checked main runs:")
        ui.table(triage.correctness_series(source, alert.case_id, alert.gpu, pool=_pool(alert)), hide_index=True, width="stretch",
                     key="alerts_correctness")
        return
    series = triage.alert_series(source, alert.case_id, alert.gpu, alert.metric, alert.run_id, pool=_pool(alert))
    if series.empty or alert.baseline_value is None:
        st.info("No stored series for this alert's case on main (its runs may have been removed).")
        return
    band = load_thresholds(alert.gpu).min_effect
    step = series.loc[series["run_id"] == alert.run_id, "x"]
    figure = charts.step_figure(series, step.iloc[0] if not step.empty else "", float(alert.baseline_value),
                                float(alert.new_value), band, triage.METRIC_NAMES.get(alert.metric, alert.metric), alert.label)
    st.plotly_chart(figure, key="alerts_step_chart", width="stretch")
    st.caption(f"Dashed: detection's median before and after the step. Grey band: before ±{band:.1%}, the min_effect "
               f"for {ui.md(alert.gpu)} (history/analysis/thresholds.toml); a step that leaves it and holds is an alert.")
    draw_counter_cause(source, alert)


def draw_counter_cause(source, alert) -> None:
    """Why the step happened by the counter rules: the cause as one line, then the ranked rules."""
    explanation = alerts.counter_cause(source, alert.kind, alert.run_id, alert.case_id)
    if explanation is None:
        st.caption("ncu: no counter cause: this run, or an earlier run on this device and branch, did not profile the case.")
        return
    st.markdown(f"**ncu cause:** {ui.md(explanation.cause)}")
    if explanation.changes:
        ui.table(alerts.counter_table(explanation), hide_index=True, width="stretch", key="alerts_ncu_rules",
                 column_config=NCU_RULE_COLUMNS)


def action_form(source, members) -> None:
    open_ids = [int(a) for a in members.loc[members["status"] != "resolved", "alert_id"]]
    st.subheader("Acknowledge or resolve this group")
    if not open_ids:
        st.caption("Every alert of this group is resolved.")
        return
    with st.form("alert_action", clear_on_submit=False):
        st.caption(f"Applies to the {len(open_ids)} alert(s) of this group that are not resolved, in one transaction.")
        st.text_area("note", max_chars=2000, key="alerts_note",
                     help="Required to acknowledge: what is known, who looks at it.")
        st.text_input("who", max_chars=100, key="alerts_actor", placeholder="your name or handle (required)",
                      help="Recorded with the change; the dashboard has no login, so say who you are.")
        left, right = st.columns(2)
        left.form_submit_button(f"Acknowledge {len(open_ids)}", key="alerts_acknowledge", on_click=apply_action,
                                args=(source, "acknowledge", open_ids))
        right.form_submit_button(f"Resolve {len(open_ids)}", key="alerts_resolve", on_click=apply_action,
                                 args=(source, "resolve", open_ids))


def apply_action(source, action: str, alert_ids: list[int]) -> None:
    """Runs as the button's callback, before the page is drawn again: the change is written
    (waiting for an ingest's lock if need be) before any read, so nothing the user typed is lost
    to a read that had to wait."""
    try:
        changed = alerts.change_status(source, alert_ids, action, st.session_state.get("alerts_note", ""),
                                       st.session_state.get("alerts_actor", ""))
    except HistoryError as exc:
        st.session_state["alerts_flash"] = ("error", f"Not changed (none of the {len(alert_ids)}): {ui.md(exc)}", None)
    else:
        # The pickers' labels carry each alert's state. Setting their (unchanged) values from here
        # makes the browser redraw the shown label: without it the selectbox kept the old text
        # ("open") although its options were relabelled.
        for key in ("alerts_group", "alerts_alert"):
            if key in st.session_state:
                st.session_state[key] = st.session_state[key]
        ids = [a.alert_id for a in changed]
        state = changed[0].status if changed else action
        st.session_state["alerts_flash"] = ("success", f"{len(ids)} alert(s) now {state}: "
                                            + ", ".join(f"#{i}" for i in ids), ids[0] if ids else None)


def show_last_change(source) -> None:
    """What the last acknowledge / resolve did (set by `apply_action`), shown once."""
    flash = st.session_state.pop("alerts_flash", None)
    if not flash:
        return
    kind, message, alert_id = flash
    if kind == "error":
        st.error(message)
        return
    st.success(message)
    if alert_id is not None:
        with st.expander(f"History of alert #{int(alert_id)}", expanded=False):
            ui.table(alerts.events_of(source, alert_id), hide_index=True, width="stretch")


ui.run_page("Alerts", alerts_page)
