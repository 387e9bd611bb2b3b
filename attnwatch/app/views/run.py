"""Run: one run in full — its commit, environment and status, every case as stored (correctness
pass / FAIL / not run, quality marks, graph-replay time), and the errors of the cases that
failed. Reached from Trends (click a point), This push, Overview and Compare; any run can be
found by search, and a run the link names is shown as named (or said not to exist)."""

import streamlit as st

from attnwatch.app import table_layout, ui
from attnwatch.app.data import quality, runs, timers
from attnwatch.app.data.baselines import gap_help, gap_label
from attnwatch.app.url_state import UrlState, url_text
from attnwatch.history.links import compare_query
from attnwatch.history import reproduce
from attnwatch.history.contract.series_key import series_gpu

PICKER_RUNS = 100  # runs listed before searching; the search reaches every run


def result_columns(results, timer: str, timer_help: str, baselines=()) -> dict:
    """The first columns of the case table, labelled with the timer the run stored
    (app.data.timers) and sized to their headers and cells (app.table_layout), so that at
    1440x900 the case, its outcome and its number are on screen whole; every other stored column
    follows them."""
    measured = f"timed by {timer_help}"
    fit, numbers = table_layout.fit, table_layout.number_texts
    median_label, tflops_label, gap = f"median µs ({timer})", f"TFLOPS ({timer})", gap_label(baselines)
    decimals = table_layout.decimals_for(results["tflops"])
    return {
        "case_id": st.column_config.TextColumn("case", width=fit("case", results["case_id"], most=420)),
        "status": st.column_config.TextColumn("status", width=fit("status", results["status"])),
        "correctness": st.column_config.TextColumn("correct", width=fit("correct", results["correctness"])),
        "median_us": st.column_config.NumberColumn(
            median_label, format="%.2f", help=measured, width=fit(median_label, numbers(results["median_us"], 2))
        ),
        "tflops": st.column_config.NumberColumn(
            tflops_label,
            format=f"%.{decimals}f",
            help=measured,
            width=fit(tflops_label, numbers(results["tflops"], decimals)),
        ),
        "gap_to_baseline": st.column_config.NumberColumn(
            gap, format="%.3f×", width=fit(gap, ["0.000×"]), help=gap_help(baselines, measured)
        ),
        "graph_median_us": st.column_config.NumberColumn(
            "µs (graph replay)", format="%.2f", width=fit("µs (graph replay)")
        ),
        "marks": st.column_config.TextColumn("marks", width=160),
        "recipe": st.column_config.TextColumn(
            "recipe",
            width=160,
            help="how the samples were taken on a GPU that may run under its power cap "
            "(ci/run_config.toml [timing.recipes]); empty: plain",
        ),
        "clock_normalised_median_us": st.column_config.NumberColumn(
            "clock-normalised µs (not a latency)",
            format="%.2f",
            width=fit("clock-normalised µs (not a latency)"),
            help="median of time × SM clock / reference clock: cycle space, stored beside the latency, never in its place",
        ),
        "measure_again": st.column_config.TextColumn(
            "measure again",
            width=200,
            help="the command that measures this case again at this run's commit "
            "(history.reproduce): copy it into a checkout of the repository",
        ),
    }


ENVIRONMENT_FIELDS = (
    "run_id",
    "repo",
    "commit_sha",
    "parent_sha",
    "branch",
    "pr_number",
    "trigger",
    "status",
    "started_at",
    "finished_at",
    "runner",
    "shape_set",
    "synthetic",
    "dirty",
    "gpu_name",
    "gpu_uuid",
    "driver_version",
    "cuda_version",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "torch_version",
    "triton_version",
    "cupy_version",
    "nvcc_version",
    "packages",
    "python_version",
    "hostname",
    "source",
    "ingested_at",
    "notes",
)


def run_page(source, shape):
    url = UrlState()
    search = st.text_input("find a run (id, commit sha prefix, branch or PR number)", key="run_search", max_chars=200)
    found = runs.find_runs(source, search, None, PICKER_RUNS)
    wanted = url_text("run")
    labels = (
        {row.run_id: ui.run_label(row) for row in runs.runs_by_id(source, (wanted,)).itertuples()} if wanted else {}
    )
    labels.update({row.run_id: ui.run_label(row) for row in found.itertuples()})
    if wanted and wanted not in labels:
        labels = {wanted: wanted, **labels}  # kept as named: the page then says it does not exist
    ids = list(labels)
    if not ids:
        st.info("No run matches this search.")
        return
    url.choice("run_pick", "run", ids, ids[0])
    run_id = st.selectbox("run", ids, format_func=labels.get, key="run_pick")
    url.publish()
    header = runs.run_header(source, run_id)
    if header.empty:
        st.warning(f"No run with id '{ui.md(run_id)}' in this history.")
        return
    run = header.iloc[0]
    if run.status != "complete":
        st.warning(f"This run's status is '{ui.md(run.status)}': some or all cases did not produce a measurement.")
    if bool(run.synthetic):
        st.error("SYNTHETIC run: generated data, not a measurement.")
    if bool(run.dirty):
        st.warning(
            "This run measured uncommitted changes on top of its commit: no commit holds the code that ran, "
            "so checking the commit out measures something else (the commands below say so)."
        )
    st.subheader("Commit")
    st.text(f"{run.commit_sha or '(none)'}  {str(run.commit_date or '')[:19]}")
    st.text(str(run.commit_message or "(no message stored)")[:4000])
    results = runs.run_results(source, run_id)
    if results.empty:
        st.info("This run stored no case results (it may have failed before any case ran).")
    else:
        device = "cpu" if str(run.device_kind) == "cpu" else None  # a CPU run is measured again on a CPU
        results = results.assign(
            correctness=results["correct"].map(quality.correctness_text),
            marks=quality.marks(results),
            recipe=[
                quality.recipe_text(*row)
                for row in zip(
                    results["timing_recipe"],
                    results["clock_normalised_median_us"],
                    results["band_discarded_samples"],
                    results["pacing_gap_s"],
                )
            ],
            measure_again=[
                reproduce.run_command(c, run.commit_sha, device, bool(run.dirty)) or "" for c in results["case_id"]
            ],
        )
        st.subheader("Cases")
        if results["correct"].isna().all():
            st.info("Correctness was not checked in this run: every case reads 'not run'.")
        columns = result_columns(
            results,
            timers.timer_tag(results["timing_mode"]),
            timers.timer_name(results["timing_mode"]),
            results["baseline_variant"],
        )
        results = results.assign(
            **{
                c: results[c].astype(object).where(results[c].notna(), "")
                for c in ("marks", "error", "fastest_reference", "baseline_variant")
            }
        )
        ui.table(
            results[list(columns) + [c for c in results.columns if c not in columns]],
            hide_index=True,
            width="stretch",
            column_config=columns,
            key="run_cases",
        )
        st.caption(" ".join(quality.explain(results["marks"]) + [timers.basis(results["timing_mode"])]))
        broken = results[results["status"] != "ok"]
        if not broken.empty:
            st.subheader("Cases without a measurement")
            ui.table(broken[["case_id", "status", "error"]], hide_index=True, width="stretch")
    gpu = series_gpu(run.gpu_name, run.device_kind)
    before = runs.main_run_before(source, run_id)
    if before:
        st.page_link(
            "views/compare.py",
            label=f"Compare this run with the main run before it ({ui.md(before)})",
            query_params=compare_query(gpu, base=before, head=run_id),
            icon=":material/compare_arrows:",
        )
    else:
        st.caption("No earlier main run on this GPU to compare with.")
    with st.expander("Environment and manifest"):
        fields = [f for f in ENVIRONMENT_FIELDS if f in header.columns]
        ui.table(header[fields].T.rename(columns={0: "value"}).astype(str), width="stretch")


ui.run_page("run", run_page)
