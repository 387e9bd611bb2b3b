"""Alerts: filter the regression, improvement and correctness alerts detection recorded, and
acknowledge or resolve one with a note. Changes are written through history.alerts (one
transaction, retried while an ingest holds the file), so neither side loses anything."""

import streamlit as st

from app import ui
from app.data import alerts
from history.errors import HistoryError

ALERT_COLUMNS = {
    "alert_id": st.column_config.NumberColumn("id", format="%d"),
    "change_pct": st.column_config.NumberColumn("change %", format="%+.2f"),
    "baseline_value": st.column_config.NumberColumn("before", format="%.4g"),
    "new_value": st.column_config.NumberColumn("after", format="%.4g"),
}
ORDER = ["alert_id", "status", "kind", "metric", "case_id", "gpu_name", "change_pct", "baseline_value", "new_value",
         "commit_sha", "run_id", "created_at", "updated_at", "actor", "note", "detail"]


def alerts_page(source, shape):
    show_last_change(source)
    cols = st.columns([2, 2, 2, 3])
    statuses = cols[0].multiselect("status", alerts.STATUSES, default=["open", "acknowledged"], key="alerts_status")
    kinds = cols[1].multiselect("kind", alerts.KINDS, default=list(alerts.KINDS), key="alerts_kind")
    gpu = cols[2].selectbox("GPU", ["(all)", *alerts.alert_gpus(source)], key="alerts_gpu")
    case = cols[3].text_input("case id contains", key="alerts_case", max_chars=200)
    table = alerts.alert_table(source, tuple(statuses), tuple(kinds), None if gpu == "(all)" else gpu, case.strip())
    if table.empty:
        st.success("No alerts match these filters.")
        return
    st.dataframe(table[ORDER], hide_index=True, column_config=ALERT_COLUMNS, width="stretch")
    st.subheader("Acknowledge or resolve")
    actionable = table[table["status"] != "resolved"]
    if actionable.empty:
        st.caption("Every alert shown is resolved.")
        return
    labels = {int(r.alert_id): f"#{r.alert_id} · {r.status} · {r.kind} · {ui.truncate(r.case_id, 70)}" for r in actionable.itertuples()}
    with st.form("alert_action", clear_on_submit=False):
        st.selectbox("alert", list(labels), format_func=labels.get, key="alerts_pick")
        st.text_area("note", max_chars=2000, key="alerts_note",
                     help="Required to acknowledge: what is known, who looks at it.")
        st.text_input("who", max_chars=100, key="alerts_actor", placeholder="your name or handle (required)",
                      help="Recorded with the change; the dashboard has no login, so say who you are.")
        left, right = st.columns(2)
        left.form_submit_button("Acknowledge", key="alerts_acknowledge", on_click=apply_action, args=(source, "acknowledge"))
        right.form_submit_button("Resolve", key="alerts_resolve", on_click=apply_action, args=(source, "resolve"))


def apply_action(source, action: str) -> None:
    """Runs as the button's callback, before the page is drawn again: the change is written
    (waiting for an ingest's lock if need be) before any read, so nothing the user typed is lost
    to a read that had to wait."""
    alert_id = st.session_state.get("alerts_pick")
    try:
        changed = alerts.change_status(source, alert_id, action, st.session_state.get("alerts_note", ""),
                                       st.session_state.get("alerts_actor", ""))
    except HistoryError as exc:
        st.session_state["alerts_flash"] = ("error", f"Alert #{alert_id} not changed: {ui.md(exc)}", None)
    else:
        st.session_state["alerts_flash"] = ("success", f"Alert #{changed.alert_id} is now {changed.status}.", changed.alert_id)


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
    with st.expander(f"History of alert #{int(alert_id)}", expanded=True):
        st.dataframe(alerts.events_of(source, alert_id), hide_index=True, width="stretch")


ui.run_page("Alerts", alerts_page)
