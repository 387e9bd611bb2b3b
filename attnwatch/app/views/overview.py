"""Overview: per GPU (and host, where a model ran on several), the newest complete main run — every case with its stored latency (and
graph-replay time where there is one), its change against the main run before it, µs/head,
TFLOPS, gap to the operator's baseline, correctness (pass, FAIL or not run), quality marks and recent trend, the
cases that need a look first — and the GPU's open alerts by kind."""

import numpy as np
import streamlit as st

from attnwatch.app import table_layout, ui
from attnwatch.app.data import defaults, overview, quality, runs, timers
from attnwatch.app.data.baselines import gap_help, gap_label
from attnwatch.app.sparkline import sparkline_svg
from attnwatch.app.url_state import UrlState
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history import reproduce

SPARK_RANGE = 0.15  # sparkline axis: ±15% around each case's own median
TEXT_COLUMNS = ("fastest_reference", "baseline_variant", "error", "marks")  # an empty cell reads empty, never "None"


def case_columns(cases, timer: str, timer_help: str, baselines=()) -> dict:
    """The case table's columns, in the order they are shown. First what a reader needs first
    (what identifies a case, its correctness, its number, its change and the trend), sized to
    their headers and cells (app.table_layout) so that at 1440x900 they are on screen whole; the
    derived figures follow, then the rest. `timer` names what timed the numbers (app.data.timers);
    `baselines` the rows' baseline variants, which name the gap's column (app.data.baselines)."""
    measured = f"timed by {timer_help}"
    tflops_decimals = table_layout.decimals_for(cases["tflops"])
    median_label, tflops_label = f"median µs ({timer})", f"TFLOPS ({timer})"
    trend_label, gap = f"last {overview.SPARKLINE_RUNS} main runs", gap_label(baselines)
    return {
        "operator": st.column_config.TextColumn("operator", width=table_layout.fit("operator", cases["operator"])),
        "variant": st.column_config.TextColumn("variant", width=table_layout.fit("variant", cases["variant"])),
        "shape_id": st.column_config.TextColumn("shape", width=table_layout.fit("shape", cases["shape_id"])),
        "dtype": st.column_config.TextColumn("dtype", width=table_layout.fit("dtype", cases["dtype"])),
        "causal": st.column_config.CheckboxColumn(
            "causal", width=table_layout.fit("causal", least=table_layout.CHECKBOX_PX)
        ),
        "correctness": st.column_config.TextColumn(
            "correct",
            width=table_layout.fit("correct", cases["correctness"]),
            help="every seed within tolerance, no NaN/Inf; 'not run': never checked",
        ),
        "median_us": st.column_config.NumberColumn(
            median_label,
            format="%.2f",
            help=measured,
            width=table_layout.fit(median_label, table_layout.number_texts(cases["median_us"], 2)),
        ),
        "change_pct": st.column_config.NumberColumn(
            "Δ %",
            format="%+.1f",
            width=table_layout.fit("Δ %", table_layout.number_texts(cases["change_pct"], 1, True)),
            help="median against the main run before this one on the same device, in percent (no interval: "
            "the verdicts above the table are This push's, with intervals)",
        ),
        "trend_svg": st.column_config.ImageColumn(
            trend_label,
            width=table_layout.fit(trend_label),
            help=f"median latency of each run / the median over these runs, one dot per run; axis ±{SPARK_RANGE:.0%} "
            "for every row, so noise looks like noise and a step like a step (a hollow dot on the edge left the "
            "axis: see Trends)",
        ),
        "tflops": st.column_config.NumberColumn(
            tflops_label,
            format=f"%.{tflops_decimals}f",
            help=measured,
            width=table_layout.fit(tflops_label, table_layout.number_texts(cases["tflops"], tflops_decimals)),
        ),
        "gap_to_baseline": st.column_config.NumberColumn(
            gap, format="%.3f×", width=table_layout.fit(gap, ["0.000×"]), help=gap_help(baselines, measured)
        ),
        "us_per_head": st.column_config.NumberColumn(
            "µs/head",
            format="%.3f",
            help=measured,
            width=table_layout.fit("µs/head", table_layout.number_texts(cases["us_per_head"], 3)),
        ),
        "status": st.column_config.TextColumn("status", width=table_layout.fit("status", cases["status"])),
        "marks": st.column_config.TextColumn(
            "marks", width=160, help="unconverged, throttled or dispatch-bound: see the note under the table"
        ),
        "graph_median_us": st.column_config.NumberColumn(
            "µs (graph replay)",
            format="%.2f",
            help="CUDA-graph replay median, launch gaps removed (cases under the graph threshold)",
        ),
        "open_regressions": st.column_config.NumberColumn("open regression alerts"),
        "open_improvements": st.column_config.NumberColumn("open improvement alerts"),
        "gap_to_fastest_reference": st.column_config.NumberColumn(
            "gap to fastest reference",
            format="%.3f×",
            help="median / median(the fastest of the operator's references measured in the same run)",
        ),
        "fastest_reference": st.column_config.TextColumn("fastest reference"),
        "baseline_variant": st.column_config.TextColumn("baseline"),
        "correctness_seeds": st.column_config.NumberColumn("seeds"),
        "worst_rel_err": st.column_config.NumberColumn("worst rel err", format="%.2e"),
        "rel_spread": st.column_config.NumberColumn("IQR/median", format="percent"),
        "n_samples": st.column_config.NumberColumn("samples"),
        "error": st.column_config.TextColumn("error"),
        "case_id": st.column_config.TextColumn("case id"),
        "measure_again": st.column_config.TextColumn(
            "measure again", help="the command that measures this case again at this run's commit (history.reproduce)"
        ),
    }


ALERT_COLUMNS = {
    "change_pct": st.column_config.NumberColumn(
        "change", format="%+.1f%%", help="after / before − 1, as detection stored it"
    ),
    "baseline_value": st.column_config.NumberColumn("before", format="%.4g"),
    "new_value": st.column_config.NumberColumn("after", format="%.4g"),
}
ALERT_ORDER = [
    "kind",
    "metric",
    "case_id",
    "change_pct",
    "baseline_value",
    "new_value",
    "commit_sha",
    "created_at",
    "alert_id",
    "run_id",
    "detail",
]


def needs_a_look(cases, min_effect_pct: float):
    """Rows sorted so what needs attention comes first: correctness failures, cases that failed
    to produce a number, regressions of the run (`verdict`: This push's), cases whose median moved
    by at least the device's min_effect since the run before, cases with an open regression
    alert, then marked numbers; within each, the largest change first. Cases skipped as not
    runnable on this device come last: they have nothing to look at."""
    moved = cases["change_pct"].abs() >= min_effect_pct
    skipped = cases["status"].eq("skipped")
    rank = (
        cases["correctness"].eq("FAIL") * 32
        + (cases["status"].ne("ok") & ~skipped) * 16
        + cases["verdict"].eq(overview.REGRESSION) * 8
        + moved.fillna(False).astype(bool) * 4
        + (cases["open_regressions"] > 0) * 2
        + cases["marks"].ne("") * 1
        - skipped * 64
    )
    size = cases["change_pct"].abs().fillna(0.0)
    return (
        cases.assign(_rank=-rank, _size=-size)
        .sort_values(["_rank", "_size"], kind="stable")
        .drop(columns=["_rank", "_size"])
    )


def metrics(cases, from_push: bool) -> None:
    """Counts across the run's cases; a correctness check that never ran reads 'not run'. The
    regressions and improvements are the run's against the main run before it, as This push
    judges them (`from_push`: they are This push's own), never the open alerts, which may be of
    an older step; those are listed, by case, under the table."""
    checked = cases["correct"].notna()
    judged = cases["verdict"].value_counts()
    whose = (
        "This push's verdict" if from_push else "Compare's verdict"
    ) + " against the main run before this one (interval over both runs' samples, CI's rule)"
    moved = int(judged.get(overview.MOVED, 0))
    cols = st.columns(6)
    cols[0].metric("cases", len(cases))
    cols[1].metric("timed ok", int((cases["status"] == "ok").sum()))
    cols[2].metric(
        "failed / crashed",
        int(cases["status"].isin(["failed", "crashed", "timeout"]).sum()),
        help="failed, crashed or timed out; cases skipped as not runnable on this device are not counted",
    )
    cols[3].metric(
        "correctness failures",
        int((cases["correctness"] == "FAIL").sum()) if checked.any() else "not run",
        help=f"{int((~checked).sum())} case(s) not checked" if (~checked).any() else None,
    )
    cols[4].metric(
        "regressions",
        int(judged.get(overview.REGRESSION, 0)),
        help=whose + (f"; {moved} more moved by at least min_effect without samples for an interval" if moved else ""),
    )
    cols[5].metric("improvements", int(judged.get(overview.IMPROVEMENT, 0)), help=whose)


def operator_filter(cases):
    """The rows of the operator picked above the table, when the run measured several (each has
    its own shapes, baseline and units of work); every row when it measured one."""
    operators = sorted(cases["operator"].dropna().unique())
    if len(operators) < 2:
        return cases
    picked = st.selectbox(
        "operator",
        ["all", *operators],
        key="overview_operator",
        help="each operator (kernels/operators.py) has its own shapes and baseline",
    )
    return cases if picked == "all" else cases[cases["operator"] == picked]


def has_trend(trend) -> bool:
    """A trend needs two points; a case that never produced a number has no list at all."""
    return isinstance(trend, (list, tuple, np.ndarray)) and len(trend) >= 2


def with_verdicts(source, cases, run_id: str, gpu: str):
    """`cases` with `verdict`: the run's change against the run before it (overview.run_verdicts)."""
    verdicts, from_push = overview.run_verdicts(source, run_id, gpu)
    found = dict(zip(verdicts["case_id"], verdicts["verdict"]))
    return cases.assign(verdict=[found.get(c) for c in cases["case_id"]]), from_push


def overview_page(source, shape):
    url = UrlState()
    summary = overview.gpu_summary(source)
    if len(summary) > 1:
        st.subheader("Latest main run per device")
        ui.table(summary, hide_index=True, width="stretch")
    gpu = ui.gpu_picker(shape, key="overview_gpu", url=url, default=defaults.focus(source).gpu)
    pool = ui.host_picker(source, gpu, key="overview_host")
    url.publish()
    latest = runs.latest_main_run(source, gpu, pool)
    newest = overview.newest_main_run_any_status(source, gpu, pool)
    if latest.empty:
        st.info(f"No complete main-branch run on {ui.md(gpu)} yet. See the Run page for runs of other branches.")
        if not newest.empty:
            st.warning(
                f"The newest main run on this GPU, {ui.md(newest.run_id[0])}, ended with status '{ui.md(newest.status[0])}'."
            )
        return
    run = latest.iloc[0]
    if not newest.empty and newest.run_id[0] != run.run_id:
        st.warning(
            f"The newest main run on this GPU ({ui.md(newest.run_id[0])}, status '{ui.md(newest.status[0])}') did not complete; "
            "showing the latest complete one."
        )
    ui.run_caption(run)
    cases = overview.latest_cases(source, run.run_id, gpu, pool=pool)
    cases = cases.assign(
        correctness=cases["correct"].map(quality.correctness_text),
        marks=quality.marks(cases),
        measure_again=[
            reproduce.run_command(c, run.commit_sha, "cpu" if gpu == "cpu" else None, bool(run.dirty)) or ""
            for c in cases["case_id"]
        ],
    )
    cases = cases.assign(**{c: cases[c].astype(object).where(cases[c].notna(), "") for c in TEXT_COLUMNS})
    several = cases["operator"].nunique() > 1
    cases = operator_filter(cases)
    cases, from_push = with_verdicts(source, cases, run.run_id, gpu)
    cases = cases.assign(trend_svg=[sparkline_svg(t, 1 - SPARK_RANGE, 1 + SPARK_RANGE) for t in cases["trend_rel"]])
    metrics(cases, from_push)
    if cases["gap_to_baseline"].isna().all():
        st.info(
            "No gap to baseline in this run: the operator's baseline (attention: `sdpa`) was not measured on "
            "this GPU (or it failed), so there is nothing to divide by. Latency and TFLOPS are shown as measured."
        )
    if not cases["trend_us"].map(has_trend).any():
        st.caption("Only one main run on this GPU so far: the trend column fills in as runs accumulate.")
    cases = needs_a_look(cases, 100 * load_thresholds(gpu).min_effect)
    columns = case_columns(
        cases,
        timers.timer_tag(cases["timing_mode"]),
        timers.timer_name(cases["timing_mode"]),
        cases["baseline_variant"],
    )
    # The operator column leads only where the run measured several (one says nothing per row).
    order = [c for c in columns if c != "operator" or several]
    ui.table(
        cases,
        hide_index=True,
        column_config=columns,
        column_order=order,
        width="stretch",
        height=min(38 + 35 * len(cases), 1200),
        key="overview_cases",
    )
    st.caption(" ".join(quality.explain(cases["marks"]) + [timers.basis(cases["timing_mode"])]))
    st.page_link("views/run.py", label="Open this run", query_params={"run": run.run_id}, icon=":material/open_in_new:")

    st.subheader("Open alerts")
    alerts = overview.open_alerts_for_gpu(source, gpu, pool=pool)
    if alerts.empty:
        st.success(f"No open alerts on {ui.md(gpu)}.")
    else:
        counts = alerts["kind"].value_counts()
        cases_of = alerts.groupby("kind")["case_id"].nunique()
        st.markdown(
            " · ".join(
                f"{int(counts.get(k, 0))} {k} alert(s) on {int(cases_of.get(k, 0))} case(s)"
                for k in ("regression", "correctness", "improvement")
            )
        )
        ui.table(alerts, hide_index=True, width="stretch", column_config=ALERT_COLUMNS, column_order=ALERT_ORDER)
        st.page_link(
            "views/alerts.py",
            label="Triage them on the Alerts page (grouped by commit)",
            query_params={"gpu": gpu},
            icon=":material/notifications:",
        )


ui.run_page("overview", overview_page)
