"""Compare: any two runs (or the newest runs of two commits) case by case — stored medians,
the change, an interval and verdict where both runs stored samples — sortable and downloadable."""

import streamlit as st

from app import ui
from app.data import compare, runs
from history.detection.thresholds import load_thresholds

DELTA_COLUMNS = {
    "base_us": st.column_config.NumberColumn("base µs", format="%.2f"),
    "head_us": st.column_config.NumberColumn("head µs", format="%.2f"),
    "ratio": st.column_config.NumberColumn("head/base", format="%.4f"),
    "delta_pct": st.column_config.NumberColumn("Δ %", format="%+.2f"),
    "ratio_low": st.column_config.NumberColumn("interval low", format="%.4f"),
    "ratio_high": st.column_config.NumberColumn("interval high", format="%.4f"),
    "base_gap": st.column_config.NumberColumn("base gap to SDPA", format="%.3f×"),
    "head_gap": st.column_config.NumberColumn("head gap to SDPA", format="%.3f×"),
    "base_tflops": st.column_config.NumberColumn("base TFLOPS", format="%.1f"),
    "head_tflops": st.column_config.NumberColumn("head TFLOPS", format="%.1f"),
}
ORDER = ["verdict", "variant", "shape_id", "dtype", "causal", "base_us", "head_us", "delta_pct", "ratio",
         "ratio_low", "ratio_high", "base_gap", "head_gap", "base_tflops", "head_tflops",
         "base_status", "head_status", "case_id"]


def pick_two_runs(source, shape):
    """Base and head run ids, chosen as runs or as commits (a commit means its newest run on the GPU)."""
    gpu = ui.gpu_picker(shape, key="compare_gpu")
    recent = runs.recent_runs(source, gpu)
    if len(recent) < 2:
        st.info(f"{ui.md(gpu)} has {len(recent)} run(s): a comparison needs two.")
        return None, None, gpu
    mode = st.radio("compare", ["runs", "commits"], horizontal=True, key="compare_mode")
    if mode == "commits":
        commits = recent.drop_duplicates("commit_sha")  # newest run of each commit first
        labels = {row.run_id: ui.run_label(row) for row in commits.itertuples()}
    else:
        labels = {row.run_id: ui.run_label(row) for row in recent.itertuples()}
    ids = list(labels)
    if len(ids) < 2:
        st.info("Only one commit has runs on this GPU: compare runs instead.")
        return None, None, gpu
    default_base, default_head = compare.default_pair(recent[recent["run_id"].isin(ids)], st.query_params.get("head"))
    wanted_base = st.query_params.get("base", default_base)
    wanted_head = st.query_params.get("head", default_head)
    cols = st.columns(2)
    base = cols[0].selectbox("base", ids, index=ids.index(wanted_base) if wanted_base in ids else min(1, len(ids) - 1),
                             format_func=labels.get, key=f"compare_base_{mode}")
    head = cols[1].selectbox("head", ids, index=ids.index(wanted_head) if wanted_head in ids else 0,
                             format_func=labels.get, key=f"compare_head_{mode}")
    return base, head, gpu


def compare_page(source, shape):
    base, head, gpu = pick_two_runs(source, shape)
    if base is None:
        return
    if base == head:
        st.info("Base and head are the same run: choose two different ones.")
        return
    st.query_params.update({"base": base, "head": head})
    thresholds = load_thresholds(gpu)
    table = compare.compare_runs(source, base, head, gpu)
    st.caption(
        f"Verdicts use CI's rule for {ui.md(gpu)}: head/base interval ({thresholds.confidence:.0%} two-level percentile "
        f"bootstrap, the PR comment's own code, over both runs' stored samples, {compare.RESAMPLES} resamples, fixed seed) "
        f"against a min_effect of {thresholds.min_effect:.1%}. Each run is a single round, so run-to-run drift is not "
        "in the interval; a same-job A/B over several rounds (what PR comments use) puts it there."
    )
    counts = table["verdict"].value_counts()
    cols = st.columns(4)
    cols[0].metric("regressions", int(counts.get("regression", 0)))
    cols[1].metric("improvements", int(counts.get("improvement", 0)))
    cols[2].metric("no change", int(counts.get("no change", 0)))
    cols[3].metric("other (status, no samples)", int(len(table) - counts.reindex(["regression", "improvement", "no change"]).fillna(0).sum()))
    verdicts = sorted(table["verdict"].unique())
    shown = st.multiselect("verdicts shown", verdicts, default=verdicts, key="compare_verdicts")
    view = table[table["verdict"].isin(shown)][ORDER]
    st.dataframe(view, hide_index=True, column_config=DELTA_COLUMNS, width="stretch")
    st.download_button(
        "Download CSV", view.to_csv(index=False).encode("utf-8"), file_name=ui.safe_file_name(f"compare_{base}_vs_{head}.csv"),
        mime="text/csv", key="compare_csv",
    )


ui.run_page("Compare", compare_page)
