"""Trends: one stored metric over runs for chosen variants, shapes, dtype, causal mode, GPU, host
and branch (timings, ncu metrics, and the correctness check's error and margin); the p10–p90 band;
detection's change points and alerts marked. Hovering a point shows its commit; clicking it
opens that run."""

import streamlit as st

from app import charts, ui
from app.data import trends


def pick_defaults(options: list[str], preferred: tuple[str, ...], fallback: int) -> list[str]:
    chosen = [o for o in preferred if o in options]
    return chosen or options[:fallback]


def trends_page(source, shape):
    opts = trends.trend_options(source)
    top = st.columns([2, 2, 2, 3])
    with top[0]:
        gpu = ui.gpu_picker(shape, key="trends_gpu")
    with top[1]:
        pool = ui.host_picker(source, gpu, key="trends_host", allow_all=True)
    branch = top[2].selectbox("branch", opts["branches"] or ["main"], key="trends_branch")
    metric = top[3].selectbox("metric", list(trends.METRICS), key="trends_metric")
    row = st.columns([3, 3, 1.2, 1.2, 1.2, 2])
    variants = row[0].multiselect(
        "variants", opts["variants"], default=pick_defaults(opts["variants"], ("sdpa", "triton_fa2", "cuda_wmma_cpasync"), 3),
        key="trends_variants",
    )
    shapes = row[1].multiselect(
        "shapes", opts["shapes"], default=opts["shapes"][:1], key="trends_shapes",
    )
    dtype = row[2].selectbox("dtype", opts["dtypes"] or ["fp16"], key="trends_dtype")
    causal = row[3].toggle("causal", value=False, key="trends_causal")
    band = row[4].toggle("band", value=True, key="trends_band", help="p10–p90 band, where CI stored percentiles (latency).")
    max_runs = row[5].slider("newest runs", 10, 1000, 200, step=10, key="trends_max_runs")
    if not variants or not shapes:
        st.info("Choose at least one variant and one shape.")
        return

    series = trends.trend_series(source, metric, gpu, branch, tuple(variants), tuple(shapes), dtype, causal, max_runs,
                                 pool=pool)
    if series.empty:
        st.info(
            f"No stored values of '{ui.md(metric)}' for these cases on {ui.md(gpu)} ({ui.md(branch)}, {ui.md(dtype)}, "
            f"{'causal' if causal else 'non-causal'}). Failed and skipped cases have no value; "
            "ncu metrics exist only for profiled runs; the correctness margin only for runs recorded since it is stored."
        )
        return
    alerts = trends.trend_alerts(source, metric, gpu, tuple(sorted(set(series["case_id"]))), pool=pool)
    # On the chart: alerts about the plotted metric, and correctness failures (they void any metric).
    column = trends.METRICS[metric].column
    markers = alerts[(alerts["metric"] == column) | (alerts["kind"] == "correctness")]
    figure = cached_figure(series, metric, band, markers)
    event = st.plotly_chart(figure, key="trend_chart", on_select="rerun", selection_mode="points", width="stretch")
    runs_plotted = series["run_id"].nunique()
    st.caption(
        f"{runs_plotted} run(s), {series['series'].nunique()} series. "
        + ("Only one run: a trend needs at least two. " if runs_plotted == 1 else "")
        + "Click a point to open its run."
    )
    open_selected_run(event)
    if not alerts.empty:
        st.subheader("Alerts on these cases")
        st.dataframe(alerts.drop(columns=["value"]), hide_index=True, width="stretch")
    with st.expander("Plotted values"):
        st.dataframe(series, hide_index=True, width="stretch")


@st.cache_data(ttl=600, max_entries=32, show_spinner=False)
def cached_figure(series, metric, band, markers):
    """Building a figure of thousands of points costs more than its query: keep it with the data."""
    return charts.trend_figure(series, metric, band=band, markers=markers)


def open_selected_run(event) -> None:
    """A clicked point carries its run id in customdata[0]: go to that run's page."""
    points = event["selection"]["points"] if event and "selection" in event else []
    for point in points:
        custom = point.get("customdata")
        if custom:
            st.switch_page("views/run.py", query_params={"run": str(custom[0])})


ui.run_page("Trends", trends_page)
