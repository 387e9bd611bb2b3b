"""Kernel: one variant's build report over runs (registers, shared memory, spills), its Nsight
Compute metrics over runs, and a roofline under the GPU's measured ceilings — or, when it cannot
be drawn, why (no ceilings measured for the GPU, no profiled case, no DRAM bytes). A
compute-bound operator's roofline (attention) places the newest profiled run by arithmetic
intensity under the GEMM peak; a memory-bound operator's (results.bound = 'memory', e.g.
RMSNorm) plots each case's achieved bandwidth, its byte model's bytes over the median, under the
measured DRAM copy bandwidth.

Every chart is an SVG image the server draws (app/kernel_charts.py, shown with `st.image`): the
page loads no chart library in the browser, whose JavaScript alone took about 2 s of a cold load.
The exact figures behind each chart are in the table under it."""

import streamlit as st

from attnwatch.app import table_layout, ui
from attnwatch.app.kernel_charts import bandwidth_svg, lines_svg, roofline_svg
from attnwatch.app.data import defaults, kernel
from attnwatch.app.url_state import UrlState
from attnwatch.history.analysis.ceilings import CeilingsError, ceilings, find_ceiling

# The build report's series, one chart per unit: registers and bytes never share an axis.
BUILD_CHARTS = (
    (["registers_per_thread"], "registers per thread"),
    (["spill_store_bytes", "spill_load_bytes", "stack_frame_bytes"], "spill / stack bytes per thread"),
    (["shared_mem_bytes"], "shared memory per block (bytes)"),
)


# A build chart's picture (px of its viewBox): three stand side by side, so each is drawn narrow
# enough that its text keeps its size in a third of the page.
BUILD_CHART_SIZE = (360, 300)

# The build table's first columns: the run's commit, then the figures the charts draw.
BUILD_FIRST = {
    "x": "commit",
    "ok": "ok",
    "registers_per_thread": "registers/thread",
    "shared_mem_bytes": "shared mem B/block",
    "spill_store_bytes": "spill stores B",
    "spill_load_bytes": "spill loads B",
    "stack_frame_bytes": "stack B",
}
# The ncu kernel table's first metrics, under short names (the full ncu name is their help).
NCU_FIRST = {
    "gpu__time_duration.sum": "duration ns",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput %",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput %",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy %",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe %",
}
# The roofline points' first columns: the point, its shape, where it sits and how near the roof.
ROOFLINE_FIRST = {
    "label": "point",
    "shape_id": "shape",
    "achieved_tflops": "TFLOP/s",
    "arithmetic_intensity": "FLOP/byte",
    "pct_of_peak": "% of peak",
    "run_id": "run",
}


def first_columns_table(frame, first: dict, key: str, helps: dict | None = None) -> None:
    """`frame` with the columns of `first` leading, under its names, each sized to its header and
    cells (app.table_layout) so that at 1440x900 they are on screen whole; the rest follow."""
    helps = helps or {}
    config = {}
    for column, title in first.items():
        if column not in frame.columns:
            continue
        values = frame[column]
        if values.dtype.kind in "iuf":
            whole = values.dropna().eq(values.dropna().round()).all()
            decimals = 0 if whole else table_layout.decimals_for(values, significant=3)
            config[column] = st.column_config.NumberColumn(
                title,
                format=f"%.{decimals}f",
                help=helps.get(column),
                width=table_layout.fit(title, table_layout.number_texts(values, decimals)),
            )
        elif values.dtype.kind == "b":
            config[column] = st.column_config.CheckboxColumn(
                title, width=table_layout.fit(title, least=table_layout.CHECKBOX_PX)
            )
        else:
            config[column] = st.column_config.TextColumn(
                title, help=helps.get(column), width=table_layout.fit(title, values)
            )
    order = list(config) + [c for c in frame.columns if c not in config]
    ui.table(frame[order], hide_index=True, width="stretch", column_config=config, key=key)


def no_builds_notice(source, variant, gpu) -> None:
    """Why there is no build chart, from what the history stores (never a guess about the variant)."""
    stored = kernel.build_counts(source, variant)
    if stored.empty:
        others = kernel.variants_with_builds(source)
        st.info(
            f"This history stores no build report for {ui.md(variant)} on any device or branch (a build report is "
            "stored by runs that compile the variant: nvcc or Triton). "
            + (
                f"Variants with build reports here: {ui.md(', '.join(others))}."
                if others
                else "No run in it stored any build report."
            )
        )
        return
    where = ", ".join(f"{int(r.builds)} on {r.device} ({r.branch or 'no branch'})" for r in stored.itertuples())
    st.info(f"No build report for {ui.md(variant)} on {ui.md(gpu)}'s main runs; this history has: {ui.md(where)}.")


def build_section(source, variant, gpu):
    st.subheader("Build report")
    builds = kernel.build_history(source, variant, gpu)
    if builds.empty:
        no_builds_notice(source, variant, gpu)
        return
    failed = builds[~builds["ok"]]
    if not failed.empty:
        st.warning(f"{len(failed)} of {len(builds)} builds failed; the newest error:")
        st.code(str(failed["error"].iloc[-1] or "(no error text stored)"), language=None)
    for (series, title), column, key in zip(
        BUILD_CHARTS, st.columns(len(BUILD_CHARTS)), ("build_chart", "spill_chart", "smem_chart")
    ):
        with column:
            build_chart(builds, series, title, key, variant)
    st.caption("Each build's figures, commit and run are in the table below.")
    with st.expander("Build reports"):
        first_columns_table(builds, BUILD_FIRST, "kernel_builds")


def build_chart(builds, series, title, key, variant) -> None:
    """One build-report chart, or why there is none: a figure the builds never stored (a Triton
    build reports no ptxas spills) is said, never drawn as an empty frame; an all-zero spill
    chart says there were no spills."""
    stored = [c for c in series if builds[c].notna().any()]
    if not stored:
        st.markdown(f"**{title}**")
        st.info(
            f"No data: the {len(builds)} build report(s) of {ui.md(variant)} shown store no {ui.md(title.split(' (')[0])} "
            "(ptxas reports it for nvcc builds; Triton and library kernels store none)."
        )
        return
    width, height = BUILD_CHART_SIZE
    st.image(lines_svg(builds, "x", stored, title, key=key, width=width, height=height), width="stretch")
    if key == "spill_chart" and not builds[stored].fillna(0).to_numpy().any():
        st.caption("No spills: 0 bytes of spill stores, loads and stack in every build shown.")
    missing = [c for c in series if c not in stored]
    if missing:
        st.caption(f"Not stored by these builds: {ui.md(', '.join(missing))}.")


def ncu_section(source, variant, gpu):
    st.subheader("Nsight Compute metrics")
    case_ids = kernel.ncu_cases_of_variant(source, variant, gpu)
    if not case_ids:
        st.info(f"No Nsight Compute metrics for {ui.md(variant)} on {ui.md(gpu)}: they are collected on nightly runs.")
        return
    case = st.selectbox("case", case_ids, key="kernel_case")
    history = kernel.ncu_history(source, case, gpu)
    wanted = st.multiselect(
        "metrics",
        list(kernel.NCU_COLUMNS),
        default=["sm_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct", "tensor_pipe_pct"],
        key="kernel_metrics",
    )
    st.image(lines_svg(history, "x", wanted, "value (units in the name)", key="ncu_chart"), width="stretch")
    with st.expander(f"Metrics of {ui.md(case)} over runs"):
        first_columns_table(
            history[["x", "run_id", "commit_sha", *[m for m in wanted if m in history]]],
            {"x": "commit", **{m: m for m in wanted}},
            "kernel_ncu_history",
        )
    newest = history.iloc[-1]
    with st.expander(f"Kernels of {ui.md(case)} in the newest profiled run ({ui.md(newest.run_id)})"):
        per_kernel = kernel.ncu_kernels_of_run(source, newest.run_id, case)
        if per_kernel.empty:
            st.caption("No per-kernel rows stored.")
        else:
            first_columns_table(
                kernel.kernels_wide(per_kernel),
                {"kernel_index": "#", "kernel": "kernel", **NCU_FIRST},
                "kernel_ncu_kernels",
                helps={m: m for m in NCU_FIRST},
            )
    since = kernel.cause_since_before(source, history, case)
    if since is not None:
        st.markdown(
            f"**Against the profiled run before (read as {'slower' if since[0] else 'faster'}):** "
            f"{ui.md(since[1].cause)}"
        )


def bandwidth_section(source, operator, gpu, chosen) -> None:
    """A memory-bound operator's roofline: achieved bandwidth (bytes / median) of each case's newest
    main run against the GPU's measured copy bandwidth."""
    try:
        memory = find_ceiling(gpu, "copy_tbps", "any")
    except CeilingsError as exc:
        st.error(str(exc))
        return
    points = kernel.bandwidth_points(source, gpu, tuple(chosen))
    points = points[points["operator"] == operator]
    if memory is None:
        measured = sorted({c.gpu for c in ceilings() if c.kind == "copy_tbps"})
        st.info(
            f"The roofline cannot be drawn here.\n\n- **No ceiling for this device**: history/analysis/ceilings.toml holds "
            f"no measured DRAM copy bandwidth for {ui.md(gpu)}; measured so far: {ui.md(', '.join(measured) or 'none')}. "
            "Roofs are drawn only from measurements, never from a datasheet (scripts/measure_ceilings.py)."
        )
        return
    if points.empty:
        st.info(
            f"The roofline cannot be drawn here.\n\n- **No timed cases with a byte model**: no ok main run of "
            f"{ui.md(', '.join(chosen)) or 'these variants'} ({ui.md(operator)}) on {ui.md(gpu)} stored bytes."
        )
        return
    label = f"measured roof: {memory.value:.2f} TB/s copy"
    st.image(bandwidth_svg(points, memory.value, label), width="stretch")
    st.caption(
        f"Ceiling: {memory.provenance} Points: each case's newest ok main run; achieved bandwidth = the operator's "
        f"byte model (the fewest DRAM bytes one call moves) / the median, both as CI stored them ({operator} is "
        "memory-bound: its roof is bandwidth, not TFLOP/s)."
    )
    with st.expander("Roofline points"):
        ui.table(
            points.assign(pct_of_roof=100 * points["achieved_tbps"] / memory.value), hide_index=True, width="stretch"
        )


def roofline_section(source, variant, gpu, all_variants, url: UrlState):
    st.subheader("Roofline")
    url.many("kernel_roofline_variants", "variants", all_variants, [variant])
    # The roofline follows the page's variant: when another is picked above, its points replace
    # the previous variant's (a choice made in the roofline's own picker stands until then).
    if st.session_state.get("kernel_roofline_for", variant) != variant:
        st.session_state["kernel_roofline_variants"] = [variant]
    st.session_state["kernel_roofline_for"] = variant
    chosen = st.multiselect("variants on the roofline", all_variants, key="kernel_roofline_variants")
    operator, bound = kernel.variant_operator(source, variant)
    if bound == "memory":
        bandwidth_section(source, operator, gpu, chosen)
        return
    inputs = kernel.roofline_inputs(source, gpu, tuple(chosen))
    dtypes = list(dict.fromkeys(inputs["dtypes"] + ["fp16", "bf16"]))
    url.choice("kernel_roofline_dtype", "dtype", dtypes, dtypes[0])
    dtype = st.selectbox("roof for dtype", dtypes, key="kernel_roofline_dtype")
    try:
        compute = find_ceiling(gpu, "matmul_tflops", dtype)
        memory = find_ceiling(gpu, "copy_tbps", dtype)
    except CeilingsError as exc:
        st.error(str(exc))
        return
    reasons = []
    if compute is None or memory is None:
        measured = sorted({c.gpu for c in ceilings()})
        missing = " or ".join(
            n for n, c in (("dense GEMM peak", compute), ("DRAM copy bandwidth", memory)) if c is None
        )
        reasons.append(
            f"**No ceilings for this device**: history/analysis/ceilings.toml holds no measured {missing} for {ui.md(gpu)} ({ui.md(dtype)}); "
            f"measured so far: {ui.md(', '.join(measured) or 'none')}. Roofs are drawn only from measurements, never from a "
            "datasheet (scripts/measure_ceilings.py prints the entries to add, run on that GPU)."
        )
    if inputs["drawable"] == 0:
        if inputs["profiled"] == 0:
            reasons.append(
                f"**No profiled cases**: no main run profiled {ui.md(', '.join(chosen)) or 'these variants'} on "
                f"{ui.md(gpu)} under Nsight Compute (nightly runs and `attnwatch ncu` do)."
            )
        elif inputs["with_bytes"] == 0:
            reasons.append(
                f"**No DRAM bytes**: {inputs['profiled']} profiled case(s), but none stored ncu's DRAM bytes "
                "(dram__bytes), so no arithmetic intensity can be placed on the x axis."
            )
        else:
            reasons.append(
                f"**No achieved TFLOPS**: {inputs['with_bytes']} profiled case(s) have DRAM bytes but no kernel "
                "duration to divide the FLOPs by."
            )
    if reasons:
        st.info("The roofline cannot be drawn here.\n\n" + "\n\n".join(f"- {r}" for r in reasons))
        return
    assert compute is not None and memory is not None  # a missing one is among the reasons above
    points = kernel.roofline_points(source, gpu, tuple(chosen))
    label = f"measured roof: {compute.value:.1f} TFLOP/s {dtype} GEMM, {memory.value:.2f} TB/s copy"
    st.image(roofline_svg(points, compute.value, memory.value, label), width="stretch")
    derived = int((points["intensity_source"] == "derived").sum() + (points["tflops_source"] == "derived").sum())
    st.caption(
        f"Ceilings: {compute.provenance} {memory.provenance} Points: each case's newest profiled run; "
        "x = FLOP per DRAM byte and y = achieved TFLOP/s as CI stored them (case FLOPs over ncu's DRAM bytes and "
        "kernel duration)"
        + (
            f"; {derived} value(s) from runs that predate those fields are derived from ncu's stored bytes/duration."
            if derived
            else "."
        )
    )
    with st.expander("Roofline points"):
        first_columns_table(points, ROOFLINE_FIRST, "kernel_roofline_points")


def kernel_page(source, shape):
    url = UrlState()
    all_variants = kernel.variants_with_data(source)
    focus = defaults.focus(source)
    cols = st.columns(2)
    with cols[0]:
        gpu = ui.gpu_picker(shape, key="kernel_gpu", url=url, default=focus.gpu)
    with_data = kernel.variants_by_recency(source, gpu)
    # Default: the variant of the newest regression on this GPU when it has build or ncu data, else
    # the most recently built or profiled one (never simply the alphabetically first, nor a variant
    # with nothing to show).
    focus_variant = focus.variant if focus.gpu == gpu and focus.variant in with_data else None
    preferred = [v for v in (focus_variant, *with_data) if v in all_variants]
    ignored = url.choice("kernel_variant", "variant", all_variants, preferred[0] if preferred else all_variants[0])
    if ignored:
        st.warning(f"The link names variant {ui.md(ignored[0])}, which has no data in this history.")
    variant = cols[1].selectbox("variant", all_variants, key="kernel_variant")
    build_section(source, variant, gpu)
    ncu_section(source, variant, gpu)
    roofline_section(source, variant, gpu, all_variants, url)
    url.publish()


ui.run_page("kernel", kernel_page)
