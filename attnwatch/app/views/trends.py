"""Trends: one stored metric over commits for chosen variants, shapes, dtype, causal mode, GPU, host
and branch (timings, ncu metrics, and the correctness check's error and margin); the p10–p90
band; detection's alerts marked; a commit range shaded. Hovering a point
shows its commit and run time; clicking it opens that run. Every choice is in the URL."""

import numpy as np
import pandas as pd

import streamlit as st

from attnwatch.app import charts, table_layout, trend_chart, ui
from attnwatch.app.data import defaults, quality, runs, timers, trends
from attnwatch.app.url_state import UrlState
from attnwatch.history.links import commit_range, parse_commit_range

RUNS_RANGE = (10, 1000)
# The alerts table's columns, what a reader acts on first (fits a 1440 px window); the rest follows.
ALERT_ORDER = ["alert_id", "series", "kind", "status", "metric", "change_pct", "started_at", "run_id", "label"]
STARTED_FORMAT, STARTED_TEXT = "YYYY-MM-DD HH:mm", "0000-00-00 00:00"  # how the run's start is shown, for its width


def alert_columns(alerts) -> dict:
    """The alerts table's columns sized to their headers and cells (app.table_layout), so that at
    1440x900 which series, what kind, how far it moved and when are on screen whole."""
    fit = table_layout.fit
    return {
        "alert_id": st.column_config.NumberColumn("id", format="%d", width=fit("id", alerts["alert_id"])),
        **{c: st.column_config.TextColumn(c, width=fit(c, alerts[c])) for c in ("series", "kind", "status", "metric")},
        "change_pct": st.column_config.NumberColumn(
            "change %",
            format="%+.1f",
            help="after / before − 1, as detection stored it",
            width=fit("change %", table_layout.number_texts(alerts["change_pct"], 1, True)),
        ),
        "started_at": st.column_config.DatetimeColumn(
            "run started", format=STARTED_FORMAT, width=fit("run started", [STARTED_TEXT])
        ),
        "run_id": st.column_config.TextColumn("run", width=fit("run", alerts["run_id"])),
        "label": st.column_config.TextColumn("alert"),
    }


def pickers(source, shape, url: UrlState):
    """Every control, seeded from the URL (else from the data), in page order."""
    opts = trends.trend_options(source)
    focus = defaults.focus(source)
    top = st.columns([2, 2, 2, 3])
    with top[0]:
        gpu = ui.gpu_picker(shape, key="trends_gpu", url=url, default=focus.gpu)
    with top[1]:
        pool = ui.host_picker(source, gpu, key="trends_host", allow_all=True)
    measured = defaults.measured_on(source, gpu)
    on_focus = focus.gpu == gpu
    main = runs.default_branch(source)
    branches = opts["branches"] or [main]
    url.choice("trends_branch", "branch", branches, main if main in branches else branches[0])
    branch = top[2].selectbox("branch", branches, key="trends_branch")
    metric_columns = list(trends.METRIC_BY_COLUMN)
    url.choice("trends_metric", "metric", metric_columns, "median_us", decode=lambda t: trends.METRIC_ALIASES.get(t, t))
    chosen_column = top[3].selectbox(
        "metric", metric_columns, key="trends_metric", format_func=lambda column: trends.METRIC_BY_COLUMN[column]
    )
    metric = trends.METRIC_BY_COLUMN[chosen_column or "median_us"]
    # The variant picker gets the widest place: at 1440 px a third of the row showed 2 of 4 chips.
    row = st.columns([6, 4])
    variants_all = measured["variants"] + [v for v in opts["variants"] if v not in measured["variants"]]
    ignored = url.many(
        "trends_variants",
        "variants",
        variants_all,
        defaults.default_variants(measured["variants"], focus.variant if on_focus else None),
    )
    variants = row[0].multiselect("variants", variants_all, key="trends_variants")
    shapes_all = measured["shapes"] + [s for s in opts["shapes"] if s not in measured["shapes"]]
    ignored += url.many(
        "trends_shapes", "shapes", shapes_all, [focus.shape_id] if on_focus and focus.shape_id else shapes_all[:1]
    )
    shapes = row[1].multiselect("shapes", shapes_all, key="trends_shapes")
    dtypes = measured["dtypes"] + [d for d in opts["dtypes"] if d not in measured["dtypes"]] or ["fp16"]
    ignored += url.choice(
        "trends_dtype", "dtype", dtypes, focus.dtype if on_focus and focus.dtype in dtypes else dtypes[0]
    )
    view = st.columns([1.3, 1.1, 2.2, 1, 1.2, 1.4])
    dtype = view[0].selectbox("dtype", dtypes, key="trends_dtype")
    url.flag("trends_causal", "causal", bool(focus.causal) if on_focus else False)
    causal = view[1].toggle("causal", key="trends_causal")
    url.integer(
        "trends_max_runs",
        "runs",
        window_default(source, gpu, branch, variants, shapes, dtype, causal, pool),
        *RUNS_RANGE,
    )
    max_runs = view[2].slider("newest runs", *RUNS_RANGE, step=10, key="trends_max_runs")
    view = view[3:]
    url.flag("trends_band", "band", True)
    band = view[0].toggle("band", key="trends_band", help="p10–p90 band, where CI stored percentiles (latency).")
    log_column = view[1]  # drawn once the values are read: its default follows their spread (draw_log_toggle)
    url.flag("trends_norm", "norm", False)
    norm = view[2].toggle(
        "normalise",
        key="trends_norm",
        help="Each series divided by its value at the start of the commit range (or its first point).",
    )
    url.text("trends_commits", "commits")
    commits = st.text_input(
        "commit range to mark (BASE..HEAD)",
        key="trends_commits",
        max_chars=200,
        help="Shaded on the chart; with 'normalise', each series is divided by its value at BASE.",
    )
    if ignored:
        st.warning(f"Not in this history for {ui.md(gpu)}, so not shown: {ui.md(', '.join(ignored))}.")
    return dict(
        gpu=gpu,
        pool=pool,
        branch=branch,
        metric=metric,
        variants=variants,
        shapes=shapes,
        dtype=dtype,
        causal=causal,
        max_runs=max_runs,
        band=band,
        log_column=log_column,
        norm=norm,
        commits=parse_commit_range(commits),
    )


def window_default(source, gpu, branch, variants, shapes, dtype, causal, pool) -> int:
    """The newest-runs window a view opens with: 200 runs, or as many as reach back to the oldest
    alert on the chosen cases (in tens, up to the slider's end), so every alert listed under the
    chart is on it."""
    back = trends.runs_back_to_alerts(source, gpu, branch, tuple(variants), tuple(shapes), dtype, causal, pool)
    return min(max(200, -(-(back or 0) // 10) * 10), RUNS_RANGE[1])


def draw_log_toggle(column, url: UrlState, values) -> bool:
    """The log-scale toggle, on by default when the plotted values spread widely (trends.wide_range):
    ten variants on a linear axis would flatten all but the slowest onto the floor."""
    url.flag("trends_log", "log", trends.wide_range(values))
    return column.toggle(
        "log scale",
        key="trends_log",
        help="On by default when the plotted values spread over "
        f"{trends.log_ratio():g}× or more (app/data/number_marks.toml).",
    )


def trends_page(source, shape):
    url = UrlState()
    c = pickers(source, shape, url)
    url.publish()
    if not c["variants"] or not c["shapes"]:
        st.info("Choose at least one variant and one shape.")
        return
    series = trends.trend_series(
        source,
        c["metric"],
        c["gpu"],
        c["branch"],
        tuple(c["variants"]),
        tuple(c["shapes"]),
        c["dtype"],
        c["causal"],
        c["max_runs"],
        pool=c["pool"],
    )
    if series.empty:
        st.info(
            f"No stored values of '{ui.md(c['metric'])}' for these cases on {ui.md(c['gpu'])} ({ui.md(c['branch'])}, "
            f"{ui.md(c['dtype'])}, {'causal' if c['causal'] else 'non-causal'}). Failed and skipped cases have no value; "
            "ncu metrics exist only for profiled runs; the correctness margin only for runs recorded since it is stored."
        )
        return
    series = series.assign(marks=quality.marks(series))
    span = c["commits"]
    highlight = commit_span(series, span)
    timed = trends.METRICS[c["metric"]].timed
    label = f"{c['metric']} · {timers.timer_name(series['timing_mode'])}" if timed else c["metric"]
    if c["norm"]:
        series = trends.normalise(series, span.base if span else None)
        label = f"{label} ÷ value at {'BASE' if span and span.base else 'first point'}"
    log_y = draw_log_toggle(c["log_column"], url, series["value"])
    url.publish()
    alerts = trends.trend_alerts(source, c["metric"], c["gpu"], tuple(sorted(set(series["case_id"]))), pool=c["pool"])
    # On the chart: alerts about the plotted metric, and correctness failures (they void any metric).
    column = trends.METRICS[c["metric"]].column
    shown = alerts[(alerts["metric"] == column) | (alerts["kind"] == "correctness")].drop(
        columns=["value", "started_at"]
    )
    markers = shown.merge(series[["series", "run_id", "x", "value"]], on=["series", "run_id"])
    epochs = trends.environment_epochs(series)
    markers = with_epochs(markers, epochs)
    spec = cached_spec(series, label, c["band"], markers, log_y, highlight)
    event = st.vega_lite_chart(
        spec=spec, key="trend_chart", on_select="rerun", selection_mode=[trend_chart.PICK], width="stretch"
    )
    runs_plotted = series["run_id"].nunique()
    flagged = series[series["marks"] != ""]
    shown_range = ui.md(commit_range(ui.short_sha(span.base), ui.short_sha(span.head))) if span else ""
    st.caption(
        f"{runs_plotted} run(s) in commit order, {series['series'].nunique()} series. "
        + ("Only one run: a trend needs at least two. " if runs_plotted == 1 else "")
        + (f"Commit range {shown_range} shaded. " if highlight else "")
        + (f"The commit range {shown_range} is not among the plotted runs. " if span and not highlight else "")
        + "Click a point to open its run."
    )
    if highlight:
        across_range(series, highlight, shown_range, c["metric"])
    environment_notes(epochs, markers)
    hollow = flagged[charts.hollow(flagged["marks"])]
    if not hollow.empty:
        st.caption(
            f"Hollow points ({len(hollow)}) are not clean kernel times: " + " ".join(quality.explain(hollow["marks"]))
        )
    if len(flagged) > len(hollow):
        st.caption(
            f"{len(flagged) - len(hollow)} solid point(s) carry a note on hover: "
            + " ".join(quality.explain(flagged.loc[~charts.hollow(flagged["marks"]), "marks"]))
        )
    open_selected_run(event)
    if not alerts.empty:
        st.subheader("Alerts on these cases")
        outside = int((~alerts["run_id"].isin(series["run_id"])).sum())
        if outside:
            st.caption(
                f"{outside} of these alerts lie outside the {c['max_runs']} newest runs plotted (or on another "
                "metric's runs): widen 'newest runs' to see them on the chart."
            )
        ui.table(
            alerts.drop(columns=["value"]),
            hide_index=True,
            width="stretch",
            column_order=ALERT_ORDER,
            column_config=alert_columns(alerts),
        )
    with st.expander("Plotted values"):
        ui.table(series, hide_index=True, width="stretch")


def with_epochs(markers, epochs):
    """Alert markers whose run starts an environment epoch say so in their label (the hover)."""
    if markers.empty or epochs.empty:
        return markers
    at = dict(zip(epochs["x"], epochs["label"]))
    return markers.assign(
        label=[
            f"{label}; coincides with an environment change: {at[x]}" if x in at else label
            for label, x in zip(markers["label"], markers["x"])
        ]
    )


def environment_notes(epochs, markers) -> None:
    """Under the chart: each environment change (the dotted lines), and each alert whose step
    coincides with one, so it is not bisected for a commit that did not cause it."""
    if epochs.empty:
        return
    st.caption(
        "Environment changes (dotted lines, before the first run of each epoch): "
        + "; ".join(f"at {ui.code_span(x)}: {ui.md(label)}" for x, label in zip(epochs["x"], epochs["label"]))
    )
    at = dict(zip(epochs["x"], epochs["label"]))
    for row in markers[markers["x"].isin(at)].drop_duplicates("alert_id").itertuples() if not markers.empty else ():
        if row.kind != "correctness":
            st.warning(
                f"The {ui.md(row.kind)} alert #{int(row.alert_id)} at {ui.code_span(row.x)} coincides with an "
                f"environment change ({ui.md(at[row.x])}): the step may be the environment's, not the code's."
            )


def across_range(series, highlight, shown_range, metric) -> None:
    """Per series, the value at the range's first and last run and the change between them."""
    at = series[series["x"].isin(highlight)].pivot_table(index="series", columns="x", values="value", aggfunc="first")
    if highlight[0] == highlight[1] or not set(highlight) <= set(at.columns):
        return
    table = at[list(highlight)].rename(columns={highlight[0]: "at BASE", highlight[1]: "at HEAD"})
    table["change %"] = (table["at HEAD"] / table["at BASE"] - 1) * 100
    st.caption(f"Across {shown_range} ({ui.md(metric)}):")
    ui.table(
        table.reset_index(),
        hide_index=True,
        width="stretch",
        key="trend_range_table",
        column_config={"change %": st.column_config.NumberColumn(format="%+.1f")},
    )


def commit_span(series, span):
    """The (first, last) x labels of the commit range's runs among the plotted ones, or None.
    Without a base (`..HEAD`), the range is the step into HEAD: from the run before it."""
    if span is None:
        return None
    runs = series.drop_duplicates("run_id").sort_values("x_order").reset_index(drop=True)
    head = runs[runs["commit_sha"].map(span.matches_head)]
    if head.empty:
        return None
    base = runs[runs["commit_sha"].map(span.matches_base)]
    if not base.empty:
        first = base["x"].iloc[-1]
    else:
        first = runs["x"].iloc[max(int(head.index[0]) - 1, 0)]
    return first, head["x"].iloc[-1]


def _frame_key(frame):
    """The cache key of a frame argument: pandas' row hash, with cells of numpy arrays (the
    `throttle_reasons` list column) as tuples. Streamlit's own frame hash refuses those cells and
    logged "default hashing method failed" on every Trends view before pickling the frame."""
    arrays = {
        c: frame[c].map(lambda v: tuple(v) if isinstance(v, np.ndarray) else v)
        for c in frame.columns
        if frame[c].dtype == object and any(isinstance(v, np.ndarray) for v in frame[c].dropna().head(1))
    }
    return (
        tuple(frame.columns),
        tuple(map(str, frame.dtypes)),
        pd.util.hash_pandas_object(frame.assign(**arrays)).to_numpy(),
    )


@st.cache_data(ttl=600, max_entries=32, show_spinner=False, hash_funcs={pd.DataFrame: _frame_key})
def cached_spec(series, metric, band, markers, log_y, highlight) -> dict:
    """The trend's Vega-Lite spec with its data, built once per distinct view (app.trend_chart):
    a rerun that only reads a click or a toggle elsewhere reuses it."""
    return trend_chart.trend_spec(series, metric, band=band, markers=markers, log_y=log_y, highlight=highlight)


def open_selected_run(event) -> None:
    """A clicked point selects its run (app.trend_chart, the `pick` parameter): go to that run's page."""
    run_id = trend_chart.selected_run(event)
    if run_id:
        st.switch_page("views/run.py", query_params={"run": run_id})


ui.run_page("trends", trends_page)
