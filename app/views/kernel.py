"""Kernel: one variant's build report over runs (registers, shared memory, spills), its Nsight
Compute metrics over runs, and a roofline of the newest profiled run under the GPU's measured
ceilings."""

import streamlit as st

from app import charts, ui
from app.data import kernel
from history.ceilings import CeilingsError, find_ceiling

BUILD_SERIES = ["registers_per_thread", "spill_store_bytes", "spill_load_bytes", "stack_frame_bytes"]


def build_section(source, variant, gpu):
    st.subheader("Build report")
    builds = kernel.build_history(source, variant, gpu)
    if builds.empty:
        st.info(f"No build reports for {ui.md(variant)} on {ui.md(gpu)}: only compiled variants (CUDA, Triton) record one.")
        return
    failed = builds[~builds["ok"]]
    if not failed.empty:
        st.warning(f"{len(failed)} of {len(builds)} builds failed; the newest error:")
        st.code(str(failed["error"].iloc[-1] or "(no error text stored)"), language=None)
    st.plotly_chart(charts.lines_figure(builds, "started_at", BUILD_SERIES, "registers / bytes"), key="build_chart", width="stretch")
    st.plotly_chart(charts.lines_figure(builds, "started_at", ["shared_mem_bytes"], "shared memory per block (bytes)"),
                    key="smem_chart", width="stretch")
    with st.expander("Build reports"):
        st.dataframe(builds, hide_index=True, width="stretch")


def ncu_section(source, variant, gpu):
    st.subheader("Nsight Compute metrics")
    case_ids = kernel.ncu_cases_of_variant(source, variant, gpu)
    if not case_ids:
        st.info(f"No Nsight Compute metrics for {ui.md(variant)} on {ui.md(gpu)}: they are collected on nightly runs.")
        return
    case = st.selectbox("case", case_ids, key="kernel_case")
    history = kernel.ncu_history(source, case, gpu)
    wanted = st.multiselect("metrics", list(kernel.NCU_COLUMNS),
                            default=["sm_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct", "tensor_pipe_pct"],
                            key="kernel_metrics")
    st.plotly_chart(charts.lines_figure(history, "started_at", wanted, "value (units in the name)"), key="ncu_chart", width="stretch")
    newest = history.iloc[-1]
    with st.expander(f"Kernels of {ui.md(case)} in the newest profiled run ({ui.md(newest.run_id)})"):
        per_kernel = kernel.ncu_kernels_of_run(source, newest.run_id, case)
        if per_kernel.empty:
            st.caption("No per-kernel rows stored.")
        else:
            st.dataframe(per_kernel.pivot_table(index=["kernel_index", "kernel_name"], columns="metric_name", values="value").reset_index(),
                         hide_index=True, width="stretch")


def roofline_section(source, variant, gpu, all_variants):
    st.subheader("Roofline")
    chosen = st.multiselect("variants on the roofline", all_variants, default=[variant], key="kernel_roofline_variants")
    dtype = st.selectbox("roof for dtype", ["fp16", "bf16"], key="kernel_roofline_dtype")
    points = kernel.roofline_points(source, gpu, tuple(chosen))
    try:
        compute = find_ceiling(gpu, "matmul_tflops", dtype)
        memory = find_ceiling(gpu, "copy_tbps", dtype)
    except CeilingsError as exc:
        st.error(str(exc))
        return
    if compute is None or memory is None:
        st.info(f"No measured {dtype} ceilings recorded for {ui.md(gpu)} (history/ceilings.toml): the roofline needs a measured "
                "GEMM peak and copy bandwidth for this GPU, never a datasheet figure.")
        if not points.empty:
            st.dataframe(points, hide_index=True, width="stretch")
        return
    if points.empty:
        st.info(f"No profiled case of {ui.md(', '.join(chosen)) or 'these variants'} on {ui.md(gpu)} has ncu DRAM bytes and achieved TFLOPS.")
        return
    label = f"measured roof: {compute.value:.1f} TFLOP/s {dtype} GEMM, {memory.value:.2f} TB/s copy"
    st.plotly_chart(charts.roofline_figure(points, compute.value, memory.value, label), key="roofline_chart", width="stretch")
    derived = int((points["intensity_source"] == "derived").sum() + (points["tflops_source"] == "derived").sum())
    st.caption(
        f"Ceilings: {compute.provenance} {memory.provenance} Points: each case's newest profiled run; "
        "x = FLOP per DRAM byte and y = achieved TFLOP/s as CI stored them (case FLOPs over ncu's DRAM bytes and "
        "kernel duration)"
        + (f"; {derived} value(s) from runs that predate those fields are derived from ncu's stored bytes/duration." if derived else ".")
    )
    with st.expander("Roofline points"):
        st.dataframe(points, hide_index=True, width="stretch")


def kernel_page(source, shape):
    all_variants = kernel.variants_with_data(source)
    cols = st.columns(2)
    with cols[0]:
        gpu = ui.gpu_picker(shape, key="kernel_gpu")
    wanted = st.query_params.get("variant")
    variant = cols[1].selectbox("variant", all_variants,
                                index=all_variants.index(wanted) if wanted in all_variants else 0, key="kernel_variant")
    build_section(source, variant, gpu)
    ncu_section(source, variant, gpu)
    roofline_section(source, variant, gpu, all_variants)


ui.run_page("Kernel", kernel_page)
