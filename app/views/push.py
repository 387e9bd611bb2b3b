"""This push: the newest main run of every GPU against the run before it, in one view —
regressions first (with their intervals and whether each is a real slowdown), then correctness
failures, cases that stopped running, improvements. Every line opens the plot that shows it."""

import pandas as pd
import streamlit as st

from app import ui
from app.data import push, quality
from history.links import alert_query, relative

MAX_LINKS = 25  # per section; the rest are in the section's table

CHANGE_COLUMNS = {
    "gpu": st.column_config.TextColumn("GPU"),
    "host": st.column_config.TextColumn("host", help="the pool (host) where the GPU model ran on several"),
    "case_id": st.column_config.TextColumn("case"),
    "delta_pct": st.column_config.NumberColumn("Δ %", format="%+.1f"),
    "ratio_low": st.column_config.NumberColumn("interval low", format="%.4f"),
    "ratio_high": st.column_config.NumberColumn("interval high", format="%.4f"),
    "base_us": st.column_config.NumberColumn("before µs (events)", format="%.2f"),
    "head_us": st.column_config.NumberColumn("after µs (events)", format="%.2f"),
    "head_graph_median_us": st.column_config.NumberColumn("after µs (graph replay)", format="%.2f",
                                                          help="CUDA-graph replay median: launch gaps removed (cases under the graph threshold only)"),
    "real": st.column_config.TextColumn("real slowdown?"),
    "head_marks": st.column_config.TextColumn("after: marks"),
    "base_marks": st.column_config.TextColumn("before: marks"),
    "correctness": st.column_config.TextColumn("correctness"),
    "verdict": st.column_config.TextColumn("verdict"),
    "plot": st.column_config.LinkColumn("plot", display_text="open trend"),
}
ORDER = ["gpu", "host", "case_id", "verdict", "correctness", "delta_pct", "ratio_low", "ratio_high", "base_us", "head_us",
         "head_graph_median_us", "real", "base_marks", "head_marks", "plot"]


def _pct(value) -> str:
    return "—" if pd.isna(value) else f"{(value - 1) * 100:+.1f}%"


def where(row) -> str:
    """The GPU, and the host where its model ran on several (each host is its own series)."""
    return f"**{ui.md(row.gpu)}**" + (f" (host {ui.code_span(row.host)})" if row.host else "")


def change_label(row) -> str:
    """One regression or improvement as a reader says it: where, what, by how much, how sure, real?"""
    interval = "" if pd.isna(row.ratio_low) else f" [{_pct(row.ratio_low)}, {_pct(row.ratio_high)}]"
    graph = "" if pd.isna(row.head_graph_median_us) else f", graph replay {row.head_graph_median_us:.3g} µs"
    return (f"{where(row)} · {ui.code_span(row.case_id)} · **{_pct(row.ratio)}**{interval} · "
            f"{row.base_us:.3g} → {row.head_us:.3g} µs{graph} · real slowdown? {ui.md(row.real or '—')}")


def gpu_summary(pairs, changes) -> None:
    """One line per GPU: which runs are compared and what the push changed there."""
    for pair in pairs.itertuples():
        rows = changes[(changes["gpu"] == pair.gpu) & (changes["host"].fillna("") == (pair.host or ""))] if not changes.empty else changes
        counts = rows["section"].value_counts() if not rows.empty else {}
        correctness = (f"{int(counts.get('correctness', 0))} correctness failure(s)" if pair.correctness_checked
                       else "correctness **not run**")
        against = (f"vs {ui.code_span(pair.base_run)} (commit {ui.code_span(ui.short_sha(pair.base_commit))})"
                   if pair.base_run else "(no earlier main run to compare with)")
        status = "" if pair.status == "complete" else f" · run status **{ui.md(pair.status)}**"
        st.markdown(
            f"{where(pair)}: run {ui.code_span(pair.run_id)} (commit {ui.code_span(ui.short_sha(pair.commit_sha))}) "
            f"{against}{status} · {int(counts.get('regression', 0))} regression(s) · {correctness} · "
            f"{int(counts.get('not measured', 0))} not measured · {int(counts.get('improvement', 0))} improvement(s)"
        )


def change_links(rows, key: str) -> None:
    for row in rows.head(MAX_LINKS).itertuples():
        if row.trend_query:
            st.page_link("views/trends.py", label=change_label(row), query_params=row.trend_query,
                         icon=":material/show_chart:")
    if len(rows) > MAX_LINKS:
        st.caption(f"{len(rows) - MAX_LINKS} more in the table below.")
    table(rows, key)


def table(rows, key: str) -> None:
    view = rows.assign(plot=[_relative_url("trends", q) for q in rows["trend_query"]])
    with st.expander(f"Table ({len(rows)} rows)"):
        st.dataframe(view[ORDER], hide_index=True, column_config=CHANGE_COLUMNS, width="stretch", key=key)


def _relative_url(path: str, query) -> str | None:
    return relative(path, query) if query else None


def correctness_links(rows) -> None:
    for row in rows.head(MAX_LINKS).itertuples():
        err = "" if pd.isna(row.head_max_abs_err) else f" · max abs err {row.head_max_abs_err:.3g}"
        st.page_link("views/run.py", query_params={"run": row.head_run}, icon=":material/error:",
                     label=f"{where(row)} · {ui.code_span(row.case_id)} · correctness **{ui.md(row.correctness)}**{err}")


def not_measured_links(rows) -> None:
    for row in rows.head(MAX_LINKS).itertuples():
        st.page_link("views/run.py", query_params={"run": row.head_run}, icon=":material/warning:",
                     label=f"{where(row)} · {ui.code_span(row.case_id)} · {ui.md(row.verdict)}")


def push_page(source, shape):
    pairs = push.newest_main_runs(source)
    changes = push.push_changes(source)
    st.caption("The newest main run of every GPU against the main run before it. Verdicts as on Compare: the "
               "head/base interval from both runs' samples against the GPU's min_effect (config/thresholds.toml).")
    gpu_summary(pairs, changes)
    for pair in pairs.itertuples():
        if not pair.correctness_checked:
            st.info(f"Correctness was not checked in run {ui.md(pair.run_id)} on {ui.md(pair.gpu)}: "
                    "its cases read 'not run', never '0 failures'.")
        if pair.status != "complete":
            st.warning(f"The newest main run on {ui.md(pair.gpu)} ({ui.md(pair.run_id)}) ended '{ui.md(pair.status)}': "
                       "only what it measured is compared.")
    if changes.empty:
        st.info("No GPU has two main runs yet: the first page compares a GPU's newest main run with the one before it.")
        return

    regressions = push.section(changes, "regression")
    st.subheader(f"Regressions ({len(regressions)})")
    if regressions.empty:
        st.success("No case is slower beyond its GPU's min_effect with confidence.")
    else:
        change_links(regressions, "push_regressions")

    failures = push.section(changes, "correctness")
    st.subheader(f"Correctness failures ({len(failures)})")
    if failures.empty:
        checked = pairs["correctness_checked"].any()
        (st.success if checked else st.info)("No correctness failure." if checked else "Correctness was not run on any GPU.")
    else:
        correctness_links(failures)

    lost = push.section(changes, "not measured")
    if not lost.empty:
        st.subheader(f"Cases that stopped producing a number ({len(lost)})")
        not_measured_links(lost)

    improvements = push.section(changes, "improvement")
    st.subheader(f"Improvements ({len(improvements)})")
    if improvements.empty:
        st.caption("None.")
    else:
        change_links(improvements, "push_improvements")

    unverified = push.section(changes, "no interval")
    if not unverified.empty:
        st.subheader(f"Moved, without samples for an interval ({len(unverified)})")
        st.caption("These runs stored no raw samples, so there is no interval and no verdict: only the ratio of medians.")
        change_links(unverified, "push_unverified")

    notes = push.quality_caption([regressions, improvements, unverified])
    st.caption(" ".join(["Marks:", *notes, quality.BASIS]) if notes else quality.BASIS)
    with st.expander("Every case of the push"):
        st.dataframe(changes.assign(plot=[_relative_url("trends", q) for q in changes["trend_query"]])[ORDER],
                     hide_index=True, column_config=CHANGE_COLUMNS, width="stretch", key="push_all")
    st.page_link("views/alerts.py", label="Alerts detection recorded, grouped by the commit that caused them",
                 icon=":material/notifications:", query_params=alert_query())


ui.run_page("This push", push_page)
