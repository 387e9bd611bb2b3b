"""Overview: per GPU (and host, where a model ran on several), the newest complete main run — every case with its stored latency,
µs/head, TFLOPS, gap-to-SDPA, correctness and recent trend — and the GPU's open alerts."""

import streamlit as st

from app import ui
from app.data import overview, runs

SPARK_RANGE = 0.15  # sparkline axis: ±15% around each case's own median

CASE_COLUMNS = {
    "variant": st.column_config.TextColumn("variant"),
    "shape_id": st.column_config.TextColumn("shape"),
    "dtype": st.column_config.TextColumn("dtype"),
    "causal": st.column_config.CheckboxColumn("causal"),
    "status": st.column_config.TextColumn("status"),
    "median_us": st.column_config.NumberColumn("median µs", format="%.2f"),
    "us_per_head": st.column_config.NumberColumn("µs/head", format="%.3f"),
    "tflops": st.column_config.NumberColumn("TFLOPS", format="%.1f"),
    "gap_to_sdpa": st.column_config.NumberColumn("gap to SDPA", format="%.3f×", help="median / median(sdpa), same run, same GPU; < 1 is faster"),
    "correct": st.column_config.CheckboxColumn("correct", help="every seed within tolerance, no NaN/Inf"),
    "trend_rel": st.column_config.LineChartColumn(
        f"last {overview.SPARKLINE_RUNS} main runs", y_min=1 - SPARK_RANGE, y_max=1 + SPARK_RANGE,
        help=f"median latency of each run / the median over these runs; axis ±{SPARK_RANGE:.0%} for every row, "
             "so noise looks like noise and a step like a step (bigger moves leave the axis: see Trends)"),
    "open_alerts": st.column_config.NumberColumn("open alerts"),
    "gap_to_fastest_backend": st.column_config.NumberColumn("gap to fastest backend", format="%.3f×"),
    "fastest_backend": st.column_config.TextColumn("fastest backend"),
    "correctness_seeds": st.column_config.NumberColumn("seeds"),
    "worst_rel_err": st.column_config.NumberColumn("worst rel err", format="%.2e"),
    "rel_spread": st.column_config.NumberColumn("IQR/median", format="%.4f"),
    "converged": st.column_config.CheckboxColumn("converged"),
    "n_samples": st.column_config.NumberColumn("samples"),
    "error": st.column_config.TextColumn("error"),
    "case_id": st.column_config.TextColumn("case id"),
}


def overview_page(source, shape):
    summary = overview.gpu_summary(source)
    if len(summary) > 1:
        st.subheader("Latest main run per GPU")
        st.dataframe(summary, hide_index=True, width="stretch")
    gpu = ui.gpu_picker(shape, key="overview_gpu")
    pool = ui.host_picker(source, gpu, key="overview_host")
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
    ui.run_metrics(cases)
    if cases["gap_to_sdpa"].isna().all():
        st.info("No gap-to-SDPA in this run: the `sdpa` baseline was not measured on this GPU (or it failed), "
                "so there is nothing to divide by. Latency and TFLOPS are shown as measured.")
    if cases["trend_us"].map(lambda t: t is None or len(t) < 2).all():
        st.caption("Only one main run on this GPU so far: the trend column fills in as runs accumulate.")
    st.dataframe(cases, hide_index=True, column_config=CASE_COLUMNS, column_order=list(CASE_COLUMNS), width="stretch",
                 height=min(38 + 35 * len(cases), 1200))
    st.page_link("views/run.py", label="Open this run", query_params={"run": run.run_id}, icon=":material/open_in_new:")

    st.subheader("Open alerts")
    alerts = overview.open_alerts_for_gpu(source, gpu, pool=pool)
    if alerts.empty:
        st.success(f"No open alerts on {ui.md(gpu)}.")
    else:
        st.dataframe(alerts, hide_index=True, width="stretch")
        st.page_link("views/alerts.py", label="Acknowledge or resolve on the Alerts page", icon=":material/notifications:")


ui.run_page("Overview", overview_page)
