"""The Kernel page's data: one variant's build reports and Nsight Compute metrics over runs,
and the points of a roofline chart."""

from __future__ import annotations

from typing import Any

import pandas as pd

from attnwatch.app.data.store import Source, cached_query, read_frame
from attnwatch.app.data.trends import RUN_ENVIRONMENT, with_commit_axis
from attnwatch.history.analysis.kernel_launches import short_kernel_name
from attnwatch.history.detection import ncu_cause
from attnwatch.history.store.settings import DEFAULT_BRANCH_SQL
from attnwatch.history.contract.series_key import series_order

RUN_COLUMNS = ", ".join(f"u.{c}" for c in RUN_ENVIRONMENT)  # the charts mark environment changes

# ncu_cases columns offered as series (all stored by CI, in base units).
NCU_COLUMNS = (
    "duration_us",
    "sm_throughput_pct",
    "dram_throughput_pct",
    "achieved_occupancy_pct",
    "theoretical_occupancy_pct",
    "tensor_pipe_pct",
    "l2_hit_rate_pct",
    "registers_per_thread",
    "shared_mem_per_block_bytes",
    "local_memory_bytes",
    "dram_bytes",
    "hmma_instructions",
    "gmma_instructions",
    "sm_clock_mhz",
    "achieved_tflops",
)


@cached_query
def variants_with_data(source: Source) -> list[str]:
    frame = read_frame(
        source,
        """
        SELECT variant FROM (SELECT DISTINCT variant FROM builds UNION SELECT DISTINCT variant FROM results)
        ORDER BY variant
        """,
    )
    return frame["variant"].tolist()


@cached_query
def variants_by_recency(source: Source, gpu: str) -> list[str]:
    """Variants with a build report or ncu metrics on `gpu`, the most recently built or profiled
    first: what the Kernel page can show anything for, in the order a reader cares about."""
    frame = read_frame(
        source,
        """
        SELECT variant, max(started_at) AS newest FROM (
            SELECT b.variant, u.started_at FROM builds b JOIN series_runs u USING (run_id)
            WHERE u.series_gpu = ?
            UNION ALL
            SELECT r.variant, u.started_at FROM ncu_cases n JOIN series_runs u USING (run_id)
            JOIN results r ON r.run_id = n.run_id AND r.case_id = n.case_id
            WHERE u.series_gpu = ?
        ) GROUP BY variant ORDER BY newest DESC, variant
        """,
        [gpu, gpu],
    )
    return frame["variant"].tolist()


@cached_query
def roofline_inputs(source: Source, gpu: str, variants: tuple[str, ...]) -> dict[str, Any]:
    """How many profiled main-run cases of `variants` on `gpu` there are, and how many of them
    have DRAM bytes and an achieved TFLOPS: says why a roofline has no points."""
    row = read_frame(
        source,
        f"""
        SELECT count(*) AS profiled, count(*) FILTER (WHERE dram_bytes > 0 OR arithmetic_intensity > 0) AS with_bytes,
               count(*) FILTER (WHERE arithmetic_intensity > 0 AND achieved_tflops > 0) AS drawable,
               coalesce(list(DISTINCT dtype ORDER BY dtype) FILTER (WHERE arithmetic_intensity > 0 AND achieved_tflops > 0), []) AS drawable_dtypes
        FROM ncu_roofline WHERE gpu = ? AND branch = {DEFAULT_BRANCH_SQL} AND list_contains(?, variant)
        """,
        [gpu, list(variants)],
    ).iloc[0]
    return {
        "profiled": int(row.profiled),
        "with_bytes": int(row.with_bytes),
        "drawable": int(row.drawable),
        "dtypes": list(row.drawable_dtypes),
    }


@cached_query
def build_history(source: Source, variant: str, gpu: str, max_runs: int = 200) -> pd.DataFrame:
    """Build reports of `variant` over the newest `max_runs` main runs on `gpu`, in series order
    (history.contract.series_key, as Trends), with the commit axis `x`, `x_order`."""
    frame = read_frame(
        source,
        f"""
        SELECT u.started_at, u.series_at, u.run_id, u.commit_sha, u.branch,
               b.ok, b.target, b.registers_per_thread, b.shared_mem_bytes, b.spill_store_bytes, b.spill_load_bytes,
               b.stack_frame_bytes, b.compile_seconds, b.cached, b.source_hash, b.error, {RUN_COLUMNS}
        FROM builds b JOIN series_runs u USING (run_id)
        WHERE b.variant = ? AND u.series_gpu = ? AND u.branch = {DEFAULT_BRANCH_SQL}
        ORDER BY {series_order("u", descending=True)} LIMIT ?
        """,
        [variant, gpu, int(max_runs)],
    )
    return with_commit_axis(frame).sort_values("x_order", kind="stable").reset_index(drop=True)


@cached_query
def build_counts(source: Source, variant: str) -> pd.DataFrame:
    """How many build reports of `variant` the history stores, per device and branch: what the
    Kernel page says when the chosen device's main runs have none."""
    return read_frame(
        source,
        """
        SELECT u.series_gpu AS device, u.branch, count(*) AS builds
        FROM builds b JOIN series_runs u USING (run_id) WHERE b.variant = ?
        GROUP BY ALL ORDER BY builds DESC, device, branch
        """,
        [variant],
    )


@cached_query
def variants_with_builds(source: Source) -> list[str]:
    return read_frame(source, "SELECT DISTINCT variant FROM builds ORDER BY 1")["variant"].tolist()


@cached_query
def ncu_cases_of_variant(source: Source, variant: str, gpu: str) -> list[str]:
    """Case ids of `variant` that have Nsight Compute metrics on `gpu`."""
    frame = read_frame(
        source,
        """
        SELECT DISTINCT n.case_id FROM ncu_cases n
        JOIN results r ON r.run_id = n.run_id AND r.case_id = n.case_id
        JOIN series_runs u ON u.run_id = n.run_id
        WHERE r.variant = ? AND u.series_gpu = ? ORDER BY 1
        """,
        [variant, gpu],
    )
    return frame["case_id"].tolist()


@cached_query
def ncu_history(source: Source, case_id: str, gpu: str, max_runs: int = 200) -> pd.DataFrame:
    """Per-case ncu metrics of one case over the newest `max_runs` profiled main runs, in commit
    order with the commit axis `x`, `x_order` (as build_history)."""
    columns = ", ".join(f"n.{c}" for c in NCU_COLUMNS)
    frame = read_frame(
        source,
        f"""
        SELECT u.started_at, u.series_at, u.run_id, u.commit_sha,
               n.kernel_count, n.occupancy_limiter, n.error, {columns}, {RUN_COLUMNS}
        FROM ncu_cases n JOIN series_runs u USING (run_id)
        WHERE n.case_id = ? AND u.series_gpu = ? AND u.branch = {DEFAULT_BRANCH_SQL}
        ORDER BY {series_order("u", descending=True)} LIMIT ?
        """,
        [case_id, gpu, int(max_runs)],
    )
    return with_commit_axis(frame).sort_values("x_order", kind="stable").reset_index(drop=True)


@cached_query
def cause_since_before(source: Source, history: pd.DataFrame, case_id: str):
    """(slower, Explanation) of the newest profiled run against the one before it (the stored
    alerts' reading, history.detection.ncu_cause: exact counters first, then the rules beyond
    their noise), or None with fewer than two profiled runs or no cause to read."""
    if len(history) < 2 or pd.isna(history.iloc[-1].duration_us) or pd.isna(history.iloc[-2].duration_us):
        return None
    slower = bool(history.iloc[-1].duration_us >= history.iloc[-2].duration_us)
    found = ncu_cause.cause_of(
        source.location, "regression" if slower else "improvement", history.iloc[-1].run_id, case_id
    )
    return (slower, found) if found is not None else None


def ncu_kernels_of_run(source: Source, run_id: str, case_id: str) -> pd.DataFrame:
    """The kernels one case launched in one profiled run, with their ncu metrics (wide)."""
    return read_frame(
        source,
        """
        SELECT kernel_index, kernel_name, metric_name, value FROM ncu_metrics
        WHERE run_id = ? AND case_id = ? ORDER BY kernel_index, metric_name
        """,
        [run_id, case_id],
    )


def kernels_wide(per_kernel: pd.DataFrame) -> pd.DataFrame:
    """ncu_kernels_of_run's rows as a table to read: one row per kernel launch, its index, its
    bare function name (history.analysis.kernel_launches: a demangled torch name runs to
    hundreds of characters), one column per metric, and ncu's full name last."""
    wide = per_kernel.pivot_table(
        index=["kernel_index", "kernel_name"], columns="metric_name", values="value"
    ).reset_index()
    wide.columns.name = None
    wide.insert(1, "kernel", wide["kernel_name"].map(short_kernel_name))
    return wide[[c for c in wide.columns if c != "kernel_name"] + ["kernel_name"]]


@cached_query
def roofline_points(source: Source, gpu: str, variants: tuple[str, ...]) -> pd.DataFrame:
    """For each profiled case of `variants` on `gpu`, its newest ncu measurement on main, every
    column from that one run: achieved TFLOPS against FLOPs per DRAM byte.

    Both come from the `ncu_roofline` view (migration 003): CI's stored values where the run
    recorded them, the case FLOPs over ncu's stored bytes / duration for older rows, with
    `intensity_source` / `tflops_source` saying which; nothing CI stored is recomputed here.
    """
    return read_frame(
        source,
        f"""
        SELECT variant || ' · ' || dtype || CASE WHEN causal THEN ' · causal' ELSE '' END AS label,
               case_id, shape_id, run_id, commit_sha, achieved_tflops, tflops_source, arithmetic_intensity,
               intensity_source, dram_bytes, dram_bytes_ideal, dram_excess_ratio, peak_tflops,
               pct_of_peak, timed_tflops, started_at AS profiled_at
        FROM ncu_roofline
        WHERE gpu = ? AND branch = {DEFAULT_BRANCH_SQL} AND list_contains(?, variant)
          AND arithmetic_intensity > 0 AND achieved_tflops > 0
        QUALIFY row_number() OVER (PARTITION BY case_id ORDER BY started_at DESC, run_id DESC) = 1
        ORDER BY label, shape_id
        """,
        [gpu, list(variants)],
    )


@cached_query
def variant_operator(source: Source, variant: str) -> tuple[str | None, str | None]:
    """(operator, bound) of `variant` as its newest stored timing says: the bound is what its
    roofline plots against, "compute" or "memory" (results.bound since migration 012);
    (None, None) when no timing records it."""
    frame = read_frame(
        source,
        """
        SELECT r.operator, r.bound FROM results r JOIN runs u USING (run_id)
        WHERE r.variant = ? AND r.bound IS NOT NULL
        ORDER BY u.started_at DESC, r.run_id DESC LIMIT 1
        """,
        [variant],
    )
    return (None, None) if frame.empty else (str(frame["operator"].iloc[0]), str(frame["bound"].iloc[0]))


@cached_query
def bandwidth_points(source: Source, gpu: str, variants: tuple[str, ...]) -> pd.DataFrame:
    """For each case of `variants` on `gpu` with a byte model's figure (results.bytes), its
    newest ok main-run timing: achieved bandwidth = bytes / median, in TB/s. Both numbers are as
    CI stored them (the operator's byte model over the CUDA-event median); nothing is re-derived."""
    return read_frame(
        source,
        f"""
        SELECT variant || ' · ' || dtype || ' · ' || split_part(case_id, '/', 4) AS label,
               case_id, shape_id, run_id, commit_sha, operator, bytes, median_us, timing_mode,
               bytes / median_us / 1e6 AS achieved_tbps, started_at AS measured_at
        FROM result_details
        WHERE series_gpu = ? AND branch = {DEFAULT_BRANCH_SQL} AND list_contains(?, variant)
          AND status = 'ok' AND bytes > 0 AND median_us > 0
        QUALIFY row_number() OVER (PARTITION BY case_id ORDER BY started_at DESC, run_id DESC) = 1
        ORDER BY label, shape_id
        """,
        [gpu, list(variants)],
    )
