"""Run: one run in full — its commit, environment and status, every case as stored, and the
errors of the cases that failed. Reached from Trends (click a point), Overview and Compare."""

import streamlit as st

from app import ui
from app.data import runs

ENVIRONMENT_FIELDS = (
    "run_id", "repo", "commit_sha", "parent_sha", "branch", "pr_number", "trigger", "status", "started_at",
    "finished_at", "runner", "shape_set", "synthetic", "dirty", "gpu_name", "gpu_uuid", "driver_version",
    "cuda_version", "sm_clock_mhz", "sm_clock_max_mhz", "torch_version", "triton_version", "cupy_version",
    "nvcc_version", "python_version", "hostname", "source", "ingested_at", "notes",
)


def run_page(source, shape):
    recent = runs.recent_runs(source)
    labels = {row.run_id: ui.run_label(row) for row in recent.itertuples()}
    wanted = st.query_params.get("run")
    if wanted and wanted not in labels:
        labels = {wanted: wanted, **labels}
    ids = list(labels)
    run_id = st.selectbox("run", ids, index=ids.index(wanted) if wanted in ids else 0, format_func=labels.get, key="run_pick")
    st.query_params["run"] = run_id
    header = runs.run_header(source, run_id)
    if header.empty:
        st.warning(f"No run with id '{ui.md(run_id)}' in this history.")
        return
    run = header.iloc[0]
    if run.status != "complete":
        st.warning(f"This run's status is '{ui.md(run.status)}': some or all cases did not produce a measurement.")
    if bool(run.synthetic):
        st.error("SYNTHETIC run: generated data, not a measurement.")
    st.subheader("Commit")
    st.text(f"{run.commit_sha or '(none)'}  {str(run.commit_date or '')[:19]}")
    st.text(str(run.commit_message or "(no message stored)")[:4000])
    results = runs.run_results(source, run_id)
    if results.empty:
        st.info("This run stored no case results (it may have failed before any case ran).")
    else:
        st.subheader("Cases")
        st.dataframe(results, hide_index=True, width="stretch")
        broken = results[results["status"] != "ok"]
        if not broken.empty:
            st.subheader("Cases without a measurement")
            st.dataframe(broken[["case_id", "status", "error"]], hide_index=True, width="stretch")
    st.page_link("views/compare.py", label="Compare this run with the main run before it",
                 query_params={"head": run_id, "gpu": str(run.gpu_name or run.device_kind)}, icon=":material/compare_arrows:")
    with st.expander("Environment and manifest"):
        fields = [f for f in ENVIRONMENT_FIELDS if f in header.columns]
        st.dataframe(header[fields].T.rename(columns={0: "value"}).astype(str), width="stretch")


ui.run_page("Run", run_page)
