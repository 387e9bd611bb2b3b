"""Overview: per GPU (and host, where a model ran on several), the newest complete main run — every case with its stored latency (and
graph-replay time where there is one), its change against the main run before it, µs/head,
TFLOPS, gap-to-SDPA, correctness (pass, FAIL or not run), quality marks and recent trend, the
cases that need a look first — and the GPU's open alerts by kind."""

import streamlit as st

from app import ui
from app.data import defaults, overview, quality, runs
from app.url_state import UrlState

SPARK_RANGE = 0.15  # sparkline axis: ±15% around each case's own median

CASE_COLUMNS = {
    "variant": st.column_config.TextColumn("variant"),
    "shape_id": st.column_config.TextColumn("shape"),
    "dtype": st.column_config.TextColumn("dtype"),
    "causal": st.column_config.CheckboxColumn("causal"),
    "status": st.column_config.TextColumn("status"),
    "correctness": st.column_config.TextColumn("correctness", help="every seed within tolerance, no NaN/Inf; 'not run': never checked"),
    "median_us": st.column_config.NumberColumn("median µs (events)", format="%.2f"),
    "change_pct": st.column_config.NumberColumn("Δ % vs previous run", format="%+.1f",
                                                help="median against the main run before this one on the same GPU (no interval: see This push / Compare)"),
    "graph_median_us": st.column_config.NumberColumn("µs (graph replay)", format="%.2f",
                                                     help="CUDA-graph replay median, launch gaps removed (cases under the graph threshold)"),
    "marks": st.column_config.TextColumn("marks", help="unconverged, throttled or dispatch-bound: see the note under the table"),
    "us_per_head": st.column_config.NumberColumn("µs/head", format="%.3f"),
    "tflops": st.column_config.NumberColumn("TFLOPS (events)", format="%.1f"),
    "gap_to_sdpa": st.column_config.NumberColumn("gap to SDPA (events)", format="%.3f×", help="median / median(sdpa), same run, same GPU; < 1 is faster"),
    "trend_rel": st.column_config.LineChartColumn(
        f"last {overview.SPARKLINE_RUNS} main runs", y_min=1 - SPARK_RANGE, y_max=1 + SPARK_RANGE,
        help=f"median latency of each run / the median over these runs; axis ±{SPARK_RANGE:.0%} for every row, "
             "so noise looks like noise and a step like a step (bigger moves leave the axis: see Trends)"),
    "open_regressions": st.column_config.NumberColumn("open regressions"),
    "open_improvements": st.column_config.NumberColumn("open improvements"),
    "gap_to_fastest_backend": st.column_config.NumberColumn("gap to fastest backend", format="%.3f×"),
    "fastest_backend": st.column_config.TextColumn("fastest backend"),
    "correctness_seeds": st.column_config.NumberColumn("seeds"),
    "worst_rel_err": st.column_config.NumberColumn("worst rel err", format="%.2e"),
    "rel_spread": st.column_config.NumberColumn("IQR/median", format="%.4f"),
    "n_samples": st.column_config.NumberColumn("samples"),
    "error": st.column_config.TextColumn("error"),
    "case_id": st.column_config.TextColumn("case id"),
}


def needs_a_look(cases):
    """Rows sorted so what needs attention comes first: correctness failures, cases without a
    number, open regressions, marked numbers; then by shape as stored."""
    rank = (cases["correctness"].eq("FAIL") * 8 + cases["status"].ne("ok") * 4
            + (cases["open_regressions"] > 0) * 2 + cases["marks"].ne("") * 1)
    return cases.assign(_rank=-rank).sort_values("_rank", kind="stable").drop(columns="_rank")


def metrics(cases) -> None:
    """Counts across the run's cases; a correctness check that never ran reads 'not run'."""
    checked = cases["correct"].notna()
    cols = st.columns(6)
    cols[0].metric("cases", len(cases))
    cols[1].metric("timed ok", int((cases["status"] == "ok").sum()))
    cols[2].metric("failed / crashed / timeout", int(cases["status"].isin(["failed", "crashed", "timeout"]).sum()))
    cols[3].metric("correctness failures", int((cases["correctness"] == "FAIL").sum()) if checked.any() else "not run",
                   help=f"{int((~checked).sum())} case(s) not checked" if (~checked).any() else None)
    cols[4].metric("open regressions", int(cases["open_regressions"].sum()))
    cols[5].metric("open improvements", int(cases["open_improvements"].sum()))


def overview_page(source, shape):
    url = UrlState()
    summary = overview.gpu_summary(source)
    if len(summary) > 1:
        st.subheader("Latest main run per GPU")
        st.dataframe(summary, hide_index=True, width="stretch")
    gpu = ui.gpu_picker(shape, key="overview_gpu", url=url, default=defaults.focus(source).gpu)
    pool = ui.host_picker(source, gpu, key="overview_host")
    url.publish()
    latest = runs.latest_main_run(source, gpu, pool)
    newest = overview.newest_main_run_any_status(source, gpu, pool)
    if latest.empty:
        st.info(f"No complete main-branch run on {ui.md(gpu)} yet. See the Run page for runs of other branches.")
        if not newest.empty:
            st.warning(f"The newest main run on this GPU, {ui.md(newest.run_id[0])}, ended with status '{ui.md(newest.status[0])}'.")
        return
    run = latest.iloc[0]
    if not newest.empty and newest.run_id[0] != run.run_id:
        st.warning(
            f"The newest main run on this GPU ({ui.md(newest.run_id[0])}, status '{ui.md(newest.status[0])}') did not complete; "
            "showing the latest complete one."
        )
    ui.run_caption(run)
    cases = overview.latest_cases(source, run.run_id, gpu, pool=pool)
    cases = cases.assign(correctness=cases["correct"].map(quality.correctness_text), marks=quality.marks(cases))
    metrics(cases)
    if cases["gap_to_sdpa"].isna().all():
        st.info("No gap-to-SDPA in this run: the `sdpa` baseline was not measured on this GPU (or it failed), "
                "so there is nothing to divide by. Latency and TFLOPS are shown as measured.")
    if cases["trend_us"].map(lambda t: t is None or len(t) < 2).all():
        st.caption("Only one main run on this GPU so far: the trend column fills in as runs accumulate.")
    cases = needs_a_look(cases)
    st.dataframe(cases, hide_index=True, column_config=CASE_COLUMNS, column_order=list(CASE_COLUMNS), width="stretch",
                 height=min(38 + 35 * len(cases), 1200))
    st.caption(" ".join(quality.explain(cases["marks"]) + [quality.BASIS]))
    st.page_link("views/run.py", label="Open this run", query_params={"run": run.run_id}, icon=":material/open_in_new:")

    st.subheader("Open alerts")
    alerts = overview.open_alerts_for_gpu(source, gpu, pool=pool)
    if alerts.empty:
        st.success(f"No open alerts on {ui.md(gpu)}.")
    else:
        counts = alerts["kind"].value_counts()
        st.markdown(" · ".join(f"{int(counts.get(k, 0))} {k}" for k in ("regression", "correctness", "improvement")))
        st.dataframe(alerts, hide_index=True, width="stretch")
        st.page_link("views/alerts.py", label="Triage them on the Alerts page (grouped by commit)",
                     query_params={"gpu": gpu}, icon=":material/notifications:")


ui.run_page("Overview", overview_page)
