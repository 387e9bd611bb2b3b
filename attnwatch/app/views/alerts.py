"""Alerts: what detection recorded, grouped by the commit range that caused it. Pick a group to see
its alerts (each labelled with kind, metric, GPU, case, change and current state) and one of them
drawn on its series with the step and the threshold band, and the counter rules' cause where
its run and an earlier one were profiled; acknowledge or resolve that one alert, or the whole group
with one note after a confirmation. The largest open cause is listed first (app.data.triage.groups).
Each group and alert has its own form, emptied once its change is written, so a note never
carries over to alerts it was not written for. Changes go through history.detection.alerts (one
transaction for the group, retried while an ingest holds the file), so neither side loses anything."""

import pandas as pd
import streamlit as st

from attnwatch.app import ui
from attnwatch.app.step_chart import step_svg
from attnwatch.app.data import alerts, timers, triage
from attnwatch.app.url_state import UrlState
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.errors import HistoryError
from attnwatch.history.links import case_trend_query, relative

# Both tables fit the page's column at 1440x900 (978 px) without scrolling sideways: what a reader
# acts on first, at fixed widths. What the chosen group or alert has besides (its commit message,
# what moved, its note) is written out under the table.
GROUP_COLUMNS = {
    "commits": st.column_config.TextColumn("commit range", width=160),
    "alerts": st.column_config.NumberColumn("alerts", width=50),
    "regressions": st.column_config.NumberColumn("regr.", width=45, help="regression alerts"),
    "improvements": st.column_config.NumberColumn("impr.", width=45, help="improvement alerts"),
    "correctness": st.column_config.NumberColumn("correct.", width=58, help="correctness alerts"),
    "largest_change_pct": st.column_config.NumberColumn("largest change", format="%+.1f%%", width=95),
    "statuses": st.column_config.TextColumn("statuses", width=140),
    "gpus": st.column_config.TextColumn("devices", width=140),
    "commit_message": st.column_config.TextColumn("commit message", width=200),
}
ALERT_COLUMNS = {
    "alert_id": st.column_config.NumberColumn("id", format="%d", width=45),
    "status": st.column_config.TextColumn("status", width=90),
    "kind": st.column_config.TextColumn("kind", width=85),
    "metric": st.column_config.TextColumn("metric", width=100),
    "case_id": st.column_config.TextColumn("case", width=205),
    "change_pct": st.column_config.NumberColumn("change", format="%+.1f%%", width=66),
    "baseline_value": st.column_config.NumberColumn("before", format="%.4g", width=62),
    "new_value": st.column_config.NumberColumn("after", format="%.4g", width=62),
    "plot": st.column_config.LinkColumn("plot", display_text="open on Trends", width=100),
    "gpu": st.column_config.TextColumn("device", width=110),
}
ALL_GPUS = "(all)"
NCU_RULE_COLUMNS = {
    "rule": st.column_config.TextColumn("counter rule (history/analysis/ncu_rules.toml)"),
    "base": st.column_config.NumberColumn("before", format="%.4g"),
    "head": st.column_config.NumberColumn("after", format="%.4g"),
    "change": st.column_config.NumberColumn("change", format="%+.1f%%"),
    "thresholds": st.column_config.NumberColumn(
        "thresholds moved", format="%.1f", help="the change over the rule's threshold; rules are ranked by it"
    ),
}


def filters(source, url: UrlState):
    # Two rows: on one row of four, the status and kind chips were cut ("acknowled", "impro").
    cols = st.columns(2)
    url.many("alerts_status", "status", alerts.STATUSES, ["open", "acknowledged"])
    statuses = cols[0].multiselect("status", alerts.STATUSES, key="alerts_status")
    url.many("alerts_kind", "kind", alerts.KINDS, list(alerts.KINDS))
    kinds = cols[1].multiselect("kind", alerts.KINDS, key="alerts_kind")
    cols = st.columns(2)
    gpus = [ALL_GPUS, *alerts.alert_gpus(source)]
    url.choice("alerts_gpu", "gpu", gpus, ALL_GPUS)
    gpu = cols[0].selectbox("GPU", gpus, key="alerts_gpu")
    url.text("alerts_case", "case")
    case = cols[1].text_input("case id contains", key="alerts_case", max_chars=200)
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
    st.caption("Largest open cause first: most alerts not yet resolved, then the largest change, then the newest step.")
    ui.table(
        table.drop(columns=["group_key"]),
        hide_index=True,
        column_config=GROUP_COLUMNS,
        width="stretch",
        key="alerts_groups",
        column_order=list(GROUP_COLUMNS),
    )
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
    started = (
        ""
        if pd.isna(first.run_started_at)
        else f" · step run started {pd.Timestamp(first.run_started_at):%Y-%m-%d %H:%M}"
    )
    st.markdown(f"**{ui.md(triage.short_range(first.prev_sha, first.commit_sha))}**{ui.md(started)} · commit message:")
    st.text(ui.truncate(first.commit_message, 200) or "(no message stored)")
    view = members.assign(plot=[_trend_link(r) for r in members.itertuples()])
    ui.table(
        view,
        hide_index=True,
        column_config=ALERT_COLUMNS,
        width="stretch",
        key="alerts_members",
        column_order=list(ALERT_COLUMNS),
    )
    ids = [int(a) for a in members["alert_id"]]
    names = {int(r.alert_id): r.label for r in members.itertuples()}
    url.choice("alerts_alert", "alert", ids, ids[0], decode=lambda t: int(t) if t.isdigit() else None)
    chosen = st.selectbox(
        "alert drawn on its series", ids, format_func=lambda alert_id: names[alert_id], key="alerts_alert"
    )
    alert = members[members["alert_id"] == chosen].iloc[0]
    describe_alert(alert)
    draw_alert(source, alert)
    action_form(source, members, key, alert)


def describe_alert(alert) -> None:
    """What the members table leaves out, for the chosen alert: what moved, its note."""
    if alert.moved:
        st.caption(f"What moved across the step: {ui.md(alert.moved)}")
    if isinstance(alert.note, str) and alert.note:
        st.caption(f"Note ({ui.md(alert.status)}, by {ui.md(alert.actor)}): {ui.md(ui.truncate(alert.note, 300))}")


def _trend_link(row) -> str | None:
    metric = row.metric if row.metric in triage.SERIES_METRICS else "median_us"
    query = case_trend_query(
        row.gpu, row.case_id, metric=metric, commits=f"{row.prev_sha or ''}..{row.commit_sha or ''}", host=_pool(row)
    )
    return relative("trends", query) if query else None


def _pool(row) -> str | None:
    """The pool of the series the alert was found in (None: an alert from before pools)."""
    return None if pd.isna(row.pool) else str(row.pool)


def draw_alert(source, alert) -> None:
    """The step on its series: values, the levels before and after, and the threshold band."""
    if alert.metric not in triage.SERIES_METRICS:
        st.caption(f"Correctness of {ui.md(alert.case_id)} on {ui.md(alert.gpu)} over the newest checked main runs:")
        ui.table(
            triage.correctness_series(source, alert.case_id, alert.gpu, pool=_pool(alert)),
            hide_index=True,
            width="stretch",
            key="alerts_correctness",
        )
        return
    series = triage.alert_series(source, alert.case_id, alert.gpu, alert.metric, alert.run_id, pool=_pool(alert))
    if series.empty or alert.baseline_value is None:
        st.info("No stored series for this alert's case on main (its runs may have been removed).")
        return
    band = load_thresholds(alert.gpu).min_effect
    step = series.loc[series["run_id"] == alert.run_id, "x"]
    axis = f"{triage.METRIC_AXES[alert.metric]}, {timers.timer_name(series['timing_mode'])}"
    svg = step_svg(
        series,
        step.iloc[0] if not step.empty else "",
        float(alert.baseline_value),
        float(alert.new_value),
        band,
        axis,
        alert.label,
    )
    st.image(svg, width="stretch")
    st.caption(
        f"Dashed: detection's median before and after the step. Grey band: before ±{band:.1%}, the min_effect "
        f"for {ui.md(alert.gpu)} (history/analysis/thresholds.toml); a step that leaves it and holds is an alert."
    )
    draw_counter_cause(source, alert)


def draw_counter_cause(source, alert) -> None:
    """Why the step happened by the counter rules: the cause as one line, then the ranked rules."""
    explanation = alerts.counter_cause(source, alert.kind, alert.run_id, alert.case_id)
    if explanation is None:
        st.caption(
            "ncu: no counter cause: this run, or an earlier run on this device and branch, did not profile the case."
        )
        return
    st.markdown(f"**ncu cause:** {ui.md(explanation.cause)}")
    if explanation.changes:
        ui.table(
            alerts.counter_table(explanation),
            hide_index=True,
            width="stretch",
            key="alerts_ncu_rules",
            column_config=NCU_RULE_COLUMNS,
        )


PENDING = "alerts_pending"  # a group change waiting for its confirmation
WRITTEN = "alerts_written"  # changes written in this session: part of the form's key, so each starts empty


def action_form(source, members, group_key: str, alert) -> None:
    """Acknowledge or resolve the chosen alert alone, or every unresolved alert of its group.

    The form's keys name the group, the alert and the number of changes written so far, so the
    next group or alert starts from an empty form, and so does this one once its change is written. A change to more than one alert is only
    asked for here: it is written once the reader confirms it (`confirm_change`)."""
    open_ids = [int(a) for a in members.loc[members["status"] != "resolved", "alert_id"]]
    st.subheader("Acknowledge or resolve")
    if not open_ids:
        st.caption("Every alert of this group is resolved.")
        return
    form = f"alerts_action:{group_key}:{int(alert.alert_id)}:{st.session_state.get(WRITTEN, 0)}"
    scopes = {}
    if alert.status != "resolved":
        scopes["one"] = (f"alert #{int(alert.alert_id)} only (the one drawn above)", [int(alert.alert_id)])
    if len(open_ids) > 1 or not scopes:
        scopes["group"] = (f"all {len(open_ids)} unresolved alerts of this commit range", open_ids)
    scope = (
        st.radio("act on", list(scopes), format_func=lambda s: scopes[s][0], key=f"{form}:scope", horizontal=True)
        if len(scopes) > 1
        else next(iter(scopes))
    )
    ids = scopes[scope][1]
    target = f"#{ids[0]}" if len(ids) == 1 else f"{len(ids)}…"
    with st.form(form, clear_on_submit=False):
        st.caption(
            f"Applies to alert #{ids[0]} alone."
            if len(ids) == 1
            else f"Applies to the {len(ids)} unresolved alerts of this group, in one transaction, once confirmed."
        )
        st.text_area(
            "note", max_chars=2000, key=f"{form}:note", help="Required to acknowledge: what is known, who looks at it."
        )
        st.text_input(
            "who",
            max_chars=100,
            key=f"{form}:who",
            placeholder="your name or handle (required)",
            help="Recorded with the change; the dashboard has no login, so say who you are.",
        )
        left, right = st.columns(2)
        left.form_submit_button(
            f"Acknowledge {target}",
            key="alerts_acknowledge",
            on_click=request_change,
            args=(source, form, "acknowledge", ids),
        )
        right.form_submit_button(
            f"Resolve {target}", key="alerts_resolve", on_click=request_change, args=(source, form, "resolve", ids)
        )
    pending = st.session_state.get(PENDING)
    if pending and pending["form"] == form:
        confirmation(source, pending)


def confirmation(source, pending: dict) -> None:
    """The group change asked for, written only on 'Yes'."""
    ids, action = pending["ids"], pending["action"]
    verb = {"acknowledge": "Acknowledge", "resolve": "Resolve"}[action]
    note = f"the note “{ui.md(ui.truncate(pending['note'], 200))}”" if pending["note"].strip() else "no note"
    st.warning(
        f"{verb} all {len(ids)} alerts of this commit range with {note}, as {ui.md(pending['actor'])}? "
        f"The same note goes on every one of them: "
        + ", ".join(f"#{i}" for i in ids[:20])
        + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
        + "."
    )
    yes, no = st.columns(2)
    yes.button(
        f"Yes, {action} {len(ids)}", key="alerts_confirm", type="primary", on_click=confirm_change, args=(source,)
    )
    no.button("Cancel", key="alerts_cancel", on_click=cancel_change)


def request_change(source, form: str, action: str, alert_ids: list[int]) -> None:
    """The form's button: a change to one alert is written at once; a group's waits for its
    confirmation. A note or name the change would refuse is reported before anything is asked."""
    st.session_state.pop(PENDING, None)
    note, actor = st.session_state.get(f"{form}:note", ""), st.session_state.get(f"{form}:who", "")
    try:
        alerts.check_change(action, note, actor)
    except HistoryError as exc:
        st.session_state["alerts_flash"] = ("error", f"Not changed: {ui.md(exc)}", None)
        return
    if len(alert_ids) == 1:
        apply_change(source, form, action, alert_ids, note, actor)
    else:
        st.session_state[PENDING] = {
            "form": form,
            "action": action,
            "ids": list(alert_ids),
            "note": note,
            "actor": actor,
        }


def confirm_change(source) -> None:
    pending = st.session_state.pop(PENDING, None)
    if pending:
        apply_change(source, pending["form"], pending["action"], pending["ids"], pending["note"], pending["actor"])


def cancel_change() -> None:
    pending = st.session_state.pop(PENDING, None)
    if pending:
        st.session_state["alerts_flash"] = (
            "info",
            f"Nothing changed: the {len(pending['ids'])} alerts are as they were.",
            None,
        )


def apply_change(source, form: str, action: str, alert_ids: list[int], note: str, actor: str) -> None:
    """Runs in a button's callback, before the page is drawn again: the change is written
    (waiting for an ingest's lock if need be) before any read, so nothing the user typed is lost
    to a read that had to wait. Once written, the form is emptied."""
    try:
        changed = alerts.change_status(source, alert_ids, action, note, actor)
    except HistoryError as exc:
        st.session_state["alerts_flash"] = ("error", f"Not changed (none of the {len(alert_ids)}): {ui.md(exc)}", None)
        return
    # A new form, not the old one's fields set to "": the browser kept showing the text of a
    # form field whose value was reset from here.
    st.session_state[WRITTEN] = st.session_state.get(WRITTEN, 0) + 1
    # The pickers' labels carry each alert's state. Setting their (unchanged) values from here
    # makes the browser redraw the shown label: without it the selectbox kept the old text
    # ("open") although its options were relabelled.
    for key in ("alerts_group", "alerts_alert"):
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]
    ids = [a.alert_id for a in changed]
    state = changed[0].status if changed else action
    st.session_state["alerts_flash"] = (
        "success",
        f"{len(ids)} alert(s) now {state}: " + ", ".join(f"#{i}" for i in ids),
        ids[0] if ids else None,
    )


def show_last_change(source) -> None:
    """What the last acknowledge / resolve did (set by `apply_action`), shown once."""
    flash = st.session_state.pop("alerts_flash", None)
    if not flash:
        return
    kind, message, alert_id = flash
    if kind in ("error", "info"):
        (st.error if kind == "error" else st.info)(message)
        return
    st.success(message)
    if alert_id is not None:
        with st.expander(f"History of alert #{int(alert_id)}", expanded=False):
            ui.table(alerts.events_of(source, alert_id), hide_index=True, width="stretch")


ui.run_page("alerts", alerts_page)
