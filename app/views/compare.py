"""Compare: any two runs (or the newest runs of two commits) case by case — stored medians, the
change, an interval and verdict where both runs stored samples, correctness of both — sortable
and downloadable. Any run of the history can be reached by search; a run a link names is used
as named, or the page says it does not exist (never silently another run)."""

import streamlit as st

from app import ui
from app.data import compare, defaults, quality, runs, timers
from app.url_state import UrlState, url_text
from history.detection.thresholds import load_thresholds
from history.links import parse_commit_range
from history.series_key import series_gpu

PICKER_RUNS = 100  # runs listed before searching; the search reaches every run

def delta_columns(base_timer: str, head_timer: str, timer_help: str) -> dict:
    """The comparison table's columns in the order shown: the verdict, the case and the numbers
    that decide it fit a 1440 px screen; the rest follows. The timers come from what each run
    stored (app.data.timers), so a CPU or host wall clock is never labelled as CUDA events."""
    measured = f"timed by {timer_help}"
    return {
        "shown": st.column_config.TextColumn("verdict", width=150,
                                             help="correctness first; 'moved, no interval': the stored medians differ by at "
                                                  "least min_effect but no samples were stored for an interval"),
        "variant": st.column_config.TextColumn("variant", width=110),
        "shape_id": st.column_config.TextColumn("shape", width=95),
        "dtype": st.column_config.TextColumn("dtype", width=48),
        "causal": st.column_config.CheckboxColumn("causal", width=52),
        "delta_pct": st.column_config.NumberColumn("Δ %", format="%+.2f", width=65),
        "ratio_low": st.column_config.NumberColumn("interval low", format="%.4f", width=80),
        "ratio_high": st.column_config.NumberColumn("interval high", format="%.4f", width=80),
        "base_us": st.column_config.NumberColumn(f"base µs ({base_timer})", format="%.2f", width=100, help=measured),
        "head_us": st.column_config.NumberColumn(f"head µs ({head_timer})", format="%.2f", width=100, help=measured),
        "correctness": st.column_config.TextColumn("correct (head)", width=85,
                                                   help="pass / FAIL / not run (never counted as a pass)"),
        "head_marks": st.column_config.TextColumn("head: marks", width=140),
        "ratio": st.column_config.NumberColumn("head/base", format="%.4f"),
        "head_graph_median_us": st.column_config.NumberColumn("head µs (graph replay)", format="%.2f"),
        "base_marks": st.column_config.TextColumn("base: marks"),
        "base_gap": st.column_config.NumberColumn("base gap to SDPA", format="%.3f×", help=measured),
        "head_gap": st.column_config.NumberColumn("head gap to SDPA", format="%.3f×", help=measured),
        "base_tflops": st.column_config.NumberColumn(f"base TFLOPS ({base_timer})", format="%.1f", help=measured),
        "head_tflops": st.column_config.NumberColumn(f"head TFLOPS ({head_timer})", format="%.1f", help=measured),
        "base_status": st.column_config.TextColumn("base status"),
        "head_status": st.column_config.TextColumn("head status"),
        "verdict": st.column_config.TextColumn("timing verdict", help="from the latency alone (interval, or ratio only)"),
        "case_id": st.column_config.TextColumn("case id"),
    }


def _labels(frame, key_column: str) -> dict[str, str]:
    """Run labels without the GPU (the page has picked it): what tells runs apart stays readable."""
    return {getattr(row, key_column): ui.run_label(row).replace(f" · {row.gpu} · ", " · ") for row in frame.itertuples()}


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
    # One above the other, full width: side by side, a run's label was cut at 1440 px.
    base = st.selectbox("base", ids, format_func=labels.get, key="compare_base_runs")
    head = st.selectbox("head", ids, format_func=labels.get, key="compare_head_runs")
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
        ui.table(recent[["commit_sha", "branch", "started_at", "commit_message", "run_id"]], hide_index=True, width="stretch")
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
    run_gpu = None if header is None or header.empty else series_gpu(header["gpu_name"].iloc[0], header["device_kind"].iloc[0])
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
    table = compare.shown_verdicts(table, thresholds.min_effect)
    counts = table["shown"].value_counts()
    not_run = int((table["correctness"] == "not run").sum())
    failing = int(counts.get("correctness FAIL", 0) + counts.get("correctness FAIL (base too)", 0))
    named = ["correctness FAIL", "correctness FAIL (base too)", "regression", "moved, no interval", "improvement",
             "no change", "within min_effect, no interval"]
    cols = st.columns(6)
    cols[0].metric("correctness failures", failing if not_run < len(table) else "not run",
                   help=f"{not_run} case(s) without a correctness check in the head run" if not_run else None)
    cols[1].metric("regressions", int(counts.get("regression", 0)))
    cols[2].metric("moved, no interval", int(counts.get("moved, no interval", 0)),
                   help=f"stored medians differ by at least min_effect ({thresholds.min_effect:.1%}); no samples for an interval")
    cols[3].metric("improvements", int(counts.get("improvement", 0)))
    cols[4].metric("no change", int(counts.get("no change", 0) + counts.get("within min_effect, no interval", 0)))
    cols[5].metric("other (status)", int(len(table) - counts.reindex(named).fillna(0).sum()))
    verdicts = list(dict.fromkeys(table["shown"]))
    shown = st.multiselect("verdicts shown", verdicts, default=verdicts, key="compare_verdicts")
    view = table[table["shown"].isin(shown)]
    columns = delta_columns(timers.timer_tag(table["base_timing_mode"]), timers.timer_tag(table["head_timing_mode"]),
                            timers.timer_name(list(table["base_timing_mode"]) + list(table["head_timing_mode"])))
    view = view[list(columns)]
    ui.table(view, hide_index=True, column_config=columns, width="stretch", key="compare_table")
    notes = quality.explain(view["head_marks"]) + [n for n in quality.explain(view["base_marks"]) if n not in quality.explain(view["head_marks"])]
    st.caption(" ".join(notes + [timers.basis(list(table["base_timing_mode"]) + list(table["head_timing_mode"]))]))
    st.download_button(
        "Download CSV", view.to_csv(index=False).encode("utf-8"), file_name=ui.safe_file_name(f"compare_{base}_vs_{head}.csv"),
        mime="text/csv", key="compare_csv",
    )


ui.run_page("Compare", compare_page)
