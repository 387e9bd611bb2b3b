"""Compare: any two runs (or the newest runs of two commits) case by case — stored medians, the
change, an interval and verdict where both runs stored samples, correctness of both — sortable
and downloadable. Any run of the history can be reached by search; a run a link names is used
as named, or the page says it does not exist (never silently another run)."""

import streamlit as st

from app import ui
from app.data import compare, defaults, quality, runs
from app.url_state import UrlState, url_text
from history.detection.thresholds import load_thresholds
from history.links import parse_commit_range

PICKER_RUNS = 100  # runs listed before searching; the search reaches every run

DELTA_COLUMNS = {
    "base_us": st.column_config.NumberColumn("base µs (events)", format="%.2f"),
    "head_us": st.column_config.NumberColumn("head µs (events)", format="%.2f"),
    "head_graph_median_us": st.column_config.NumberColumn("head µs (graph replay)", format="%.2f"),
    "ratio": st.column_config.NumberColumn("head/base", format="%.4f"),
    "delta_pct": st.column_config.NumberColumn("Δ %", format="%+.2f"),
    "ratio_low": st.column_config.NumberColumn("interval low", format="%.4f"),
    "ratio_high": st.column_config.NumberColumn("interval high", format="%.4f"),
    "base_gap": st.column_config.NumberColumn("base gap to SDPA (events)", format="%.3f×"),
    "head_gap": st.column_config.NumberColumn("head gap to SDPA (events)", format="%.3f×"),
    "base_tflops": st.column_config.NumberColumn("base TFLOPS (events)", format="%.1f"),
    "head_tflops": st.column_config.NumberColumn("head TFLOPS (events)", format="%.1f"),
    "correctness": st.column_config.TextColumn("correctness (head)", help="pass / FAIL / not run (never counted as a pass)"),
    "base_marks": st.column_config.TextColumn("base: marks"),
    "head_marks": st.column_config.TextColumn("head: marks"),
}
ORDER = ["verdict", "correctness", "variant", "shape_id", "dtype", "causal", "base_us", "head_us", "delta_pct", "ratio",
         "ratio_low", "ratio_high", "head_graph_median_us", "base_marks", "head_marks", "base_gap", "head_gap",
         "base_tflops", "head_tflops", "base_status", "head_status", "case_id"]
# Rows a reader must see first.
PRIORITY = {"regression": 0, "improvement": 3, "no change": 5}


def _labels(frame, key_column: str) -> dict[str, str]:
    return {getattr(row, key_column): ui.run_label(row) for row in frame.itertuples()}


def pick_runs(source, gpu, url: UrlState):
    """Base and head run ids in 'runs' mode; None when a named run does not exist."""
    named = {side: url_text(side) for side in ("base", "head")}
    wanted = tuple(v for v in named.values() if v)
    search = st.text_input("find a run (id, commit sha prefix, branch or PR number)", key="compare_search", max_chars=200,
                           help=f"Without a search the newest {PICKER_RUNS} runs on this GPU are listed; the search reaches all of them.")
    current = tuple(v for v in (st.session_state.get("compare_base_runs"), st.session_state.get("compare_head_runs")) if v)
    frame = runs.find_runs(source, search, gpu, PICKER_RUNS)
    pinned = runs.runs_by_id(source, tuple(dict.fromkeys(wanted + current)))
    missing = [v for v in wanted if v not in set(pinned["run_id"])]
    if missing:
        st.error(f"The link names run {ui.md(', '.join(missing))}, which is not in this history: nothing is compared "
                 "(choose runs below, or check the link).")
    labels = {**_labels(pinned, "run_id"), **_labels(frame, "run_id")}
    ids = list(labels)
    if len(ids) < 2:
        st.info(f"{ui.md(gpu)} has {len(ids)} matching run(s): a comparison needs two.")
        return None, None
    head_default = named["head"] if named["head"] in labels else compare.default_pair(frame, main_branch=runs.default_branch(source))[1] or ids[0]
    base_default = runs.main_run_before(source, head_default) if head_default else None
    url.choice("compare_head_runs", "head", ids, head_default)
    url.choice("compare_base_runs", "base", ids, base_default if base_default in ids else ids[min(1, len(ids) - 1)])
    cols = st.columns(2)
    base = cols[0].selectbox("base", ids, format_func=labels.get, key="compare_base_runs")
    head = cols[1].selectbox("head", ids, format_func=labels.get, key="compare_head_runs")
    if base_default and base_default not in ids and not named["base"]:
        st.caption("The main run before the head is not listed: search for it.")
    return (None, None) if missing else (base, head)


def pick_commits(source, gpu, url: UrlState):
    """Base and head run ids in 'commits' mode (each commit's newest run on `gpu`)."""
    url.text("compare_commits", "commits")
    text = st.text_input("commits (BASE..HEAD, full shas or prefixes)", key="compare_commits", max_chars=200)
    span = parse_commit_range(text)
    recent = runs.recent_runs(source, gpu, PICKER_RUNS).drop_duplicates("commit_sha")
    with st.expander("Commits with runs on this GPU (newest first)"):
        st.dataframe(recent[["commit_sha", "branch", "started_at", "commit_message", "run_id"]], hide_index=True, width="stretch")
    if not span or not span.base or not span.head:
        st.info("Name two commits as BASE..HEAD (e.g. from the table above).")
        return None, None
    chosen = []
    for sha in (span.base, span.head):
        found = runs.newest_run_of_commit(source, sha, gpu)
        if found.empty:
            st.error(f"No run of commit {ui.md(sha)} on {ui.md(gpu)} in this history: nothing is compared.")
            return None, None
        chosen.append(found["run_id"].iloc[0])
    st.caption(f"Comparing run {ui.md(chosen[0])} (base) with run {ui.md(chosen[1])} (head).")
    return chosen[0], chosen[1]


def compare_page(source, shape):
    url = UrlState()
    named_head = url_text("head") or url_text("base")
    header = runs.run_header(source, named_head) if named_head else None
    run_gpu = None if header is None or header.empty else str(header["gpu_name"].iloc[0] or header["device_kind"].iloc[0])
    gpu = ui.gpu_picker(shape, key="compare_gpu", url=url, default=run_gpu or defaults.focus(source).gpu)
    if "compare_mode" not in st.session_state or (url_text("commits") and st.session_state.get("compare_mode") != "commits"):
        st.session_state["compare_mode"] = "commits" if url_text("commits") else "runs"
    mode = st.radio("compare", ["runs", "commits"], horizontal=True, key="compare_mode")
    base, head = pick_commits(source, gpu, url) if mode == "commits" else pick_runs(source, gpu, url)
    if mode == "commits":
        url.publish(base=None, head=None)
    else:
        url.publish(commits=None)
    if base is None:
        return
    if base == head:
        st.info("Base and head are the same run: choose two different ones.")
        return
    show_comparison(source, base, head, gpu)


def show_comparison(source, base, head, gpu) -> None:
    thresholds = load_thresholds(gpu)
    table = compare.compare_runs(source, base, head, gpu)
    st.caption(
        f"Verdicts use CI's rule for {ui.md(gpu)}: head/base interval ({thresholds.confidence:.0%} two-level percentile "
        f"bootstrap, the PR comment's own code, over both runs' stored samples, {compare.RESAMPLES} resamples, fixed seed) "
        f"against a min_effect of {thresholds.min_effect:.1%}. Each run is a single round, so run-to-run drift is not "
        "in the interval; a same-job A/B over several rounds (what PR comments use) puts it there."
    )
    counts = table["verdict"].value_counts()
    failing = int(table["correctness"].isin(["FAIL", "FAIL (base too)"]).sum())
    not_run = int((table["correctness"] == "not run").sum())
    cols = st.columns(5)
    cols[0].metric("regressions", int(counts.get("regression", 0)))
    cols[1].metric("correctness failures", failing if not_run < len(table) else "not run",
                   help=f"{not_run} case(s) without a correctness check in the head run" if not_run else None)
    cols[2].metric("improvements", int(counts.get("improvement", 0)))
    cols[3].metric("no change", int(counts.get("no change", 0)))
    cols[4].metric("other (status, no samples)", int(len(table) - counts.reindex(["regression", "improvement", "no change"]).fillna(0).sum()))
    verdicts = sorted(table["verdict"].unique())
    shown = st.multiselect("verdicts shown", verdicts, default=verdicts, key="compare_verdicts")
    view = table[table["verdict"].isin(shown)]
    order = [0 if c.startswith("FAIL") else PRIORITY.get(v, 1) for v, c in zip(view["verdict"], view["correctness"])]
    view = view.assign(_order=order).sort_values(["_order", "shape_id", "dtype", "causal", "variant"])[ORDER]
    st.dataframe(view, hide_index=True, column_config=DELTA_COLUMNS, width="stretch")
    notes = quality.explain(view["head_marks"]) + [n for n in quality.explain(view["base_marks"]) if n not in quality.explain(view["head_marks"])]
    st.caption(" ".join(notes + [quality.BASIS]))
    st.download_button(
        "Download CSV", view.to_csv(index=False).encode("utf-8"), file_name=ui.safe_file_name(f"compare_{base}_vs_{head}.csv"),
        mime="text/csv", key="compare_csv",
    )


ui.run_page("Compare", compare_page)
