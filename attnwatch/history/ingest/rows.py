"""A LoadedBundle as rows of the history's tables (Arrow tables keyed by table name).

Pure conversion: no database access. Column names match history/migrations (001, 005 for
the correctness check's margin, 012 for operators and gap_to_baseline, 014 for the optional
packages' versions, 015 for the variants' fingerprints): every field of a record is a column, none is left out.
"""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import datetime, timezone

import pyarrow as pa

from attnwatch.history.contract.bundle import CaseTiming
from attnwatch.history.contract.loaded_bundle import BenchmarkEntry, HostStats, LoadedBundle
from attnwatch.history.contract.series_key import series_pool
from attnwatch.history.store.arrow_insert import rows_to_arrow

_TIMING_COLUMNS = (
    "shape_id",
    "batch",
    "heads",
    "seq_q",
    "seq_k",
    "head_dim",
    "dtype",
    "causal",
    "timing_mode",
    "median_us",
    "p10_us",
    "p90_us",
    "iqr_us",
    "mean_us",
    "stddev_us",
    "min_us",
    "max_us",
    "us_per_head",
    "tflops",
    "graph_median_us",
    "converged",
    "rel_spread",
    "sm_clock_mhz_before",
    "sm_clock_mhz_after",
    "throttle_reasons",
    "throttled_samples",
    "interleave_group",
    "guard_retimed_blocks",
    "guard_uncovered_blocks",  # migration 004
    "kernel_config",
    "kernel_config_source",  # migration 008
    "bound",
    "bytes",
    "gap_to_baseline",
    "baseline_variant",
    "gap_to_fastest_reference",
    "fastest_reference",  # 012
    "timing_recipe",
    "sm_clock_median_mhz",
    "sm_clock_min_mhz",
    "sm_clock_max_mhz",  # migration 013
    "reference_clock_mhz",
    "clock_normalised_median_us",
    "pacing_gap_s",
    "band_discarded_samples",
    "kernel_binary_sha256",  # migration 017
)
_RESULT_TYPES = {
    "gap_to_backends__keys": pa.list_(pa.string()),
    "gap_to_backends__values": pa.list_(pa.float64()),
    "throttle_reasons": pa.list_(pa.string()),
    "error": pa.string(),
    "kernel_config": pa.string(),
    "kernel_config_source": pa.string(),
    "operator": pa.string(),
    "bound": pa.string(),
    "bytes": pa.float64(),
    "gap_to_baseline": pa.float64(),
    "baseline_variant": pa.string(),
    "gap_to_fastest_reference": pa.float64(),
    "fastest_reference": pa.string(),
    "gap_to_sdpa": pa.float64(),
    "timing_recipe": pa.string(),
    "sm_clock_median_mhz": pa.float64(),
    "sm_clock_min_mhz": pa.float64(),
    "sm_clock_max_mhz": pa.float64(),
    "reference_clock_mhz": pa.float64(),
    "clock_normalised_median_us": pa.float64(),
    "pacing_gap_s": pa.float64(),
    "band_discarded_samples": pa.int32(),
    "kernel_binary_sha256": pa.string(),
}

# Every CorrectnessRecord field is a column (migrations 001 and 005); these pin the types that
# inference gets wrong when a bundle's values are all None (a v1 bundle) or tuples.
_CORRECTNESS_TYPES = {
    "max_abs_err": pa.float64(),
    "rel_err": pa.float64(),
    "error": pa.string(),
    "profile": pa.string(),
    "calls": pa.int32(),
    "tolerance_used": pa.float64(),
    "violations": pa.int64(),
    "nonfinite": pa.int64(),
    "worst_index": pa.list_(pa.int32()),
}


def _flat(obj) -> dict:
    """A flat dataclass as a dict (dataclasses.asdict deep-copies, which costs 10x here)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def run_row(b: LoadedBundle, ingested_at: datetime | None = None) -> dict:
    m = b.manifest
    env = _flat(m.environment)
    row = {
        "run_id": m.run_id,
        "source": b.source,
        "repo": m.repo,
        "commit_sha": m.commit_sha or None,
        "parent_sha": m.parent_sha,
        "branch": m.branch,
        "pr_number": m.pr_number,
        "trigger": m.trigger,
        "started_at": datetime.fromisoformat(m.started_at),
        "finished_at": datetime.fromisoformat(m.finished_at),
        "runner": m.runner,
        "shape_set": m.shape_set,
        "status": m.status,
        "dirty": m.dirty,
        "synthetic": m.synthetic,
        "notes": m.notes,
        "pytest_benchmark_version": b.pytest_benchmark_version,
        "ncu_version": b.ncu_version,
        "bundle_schema_version": m.schema_version,
        "content_sha256": b.content_sha256,
        "ingested_at": ingested_at or datetime.now(timezone.utc).replace(tzinfo=None),
    }
    row.update(env)
    # Migration 014: the optional packages' versions as a JSON object (null: not installed);
    # NULL for a bundle of an older format, which recorded none.
    row["packages"] = json.dumps(env["packages"], sort_keys=True) if env["packages"] else None
    # Migration 006: the series pool, declared or defaulted (history.contract.series_key), so that old
    # bundles (no pool, no PCI id: NULL) fall in with their host's new runs.
    row["pool"] = series_pool(env.get("pool"), env.get("hostname"), m.runner)
    return row


def commit_row(b: LoadedBundle) -> dict | None:
    m = b.manifest
    if not m.commit_sha:
        return None
    return {
        "sha": m.commit_sha,
        "parent_sha": m.parent_sha,
        "message": m.commit_message,
        "committed_at": datetime.fromisoformat(m.commit_date) if m.commit_date else None,
        "branch": m.branch,
        "repo": m.repo or None,
    }


def result_rows(b: LoadedBundle) -> list[dict]:
    """One row per outcome, with its GPU timing and the host statistics of its benchmark entry."""
    by_case: dict[str, BenchmarkEntry] = {e.case_id or e.fullname: e for e in b.benchmarks}
    timings = {t.case_id: t for t in b.timings}
    rows = []
    for o in b.outcomes:
        entry = by_case.get(o.case_id)
        row = {
            "run_id": b.manifest.run_id,
            "case_id": o.case_id,
            "variant": o.variant,
            "operator": o.operator,
            "shape_id": o.shape_id or None,
            "dtype": o.dtype or None,
            "causal": o.causal if o.shape_id else None,
            "status": o.status,
            "error": o.error,
            "duration_s": o.duration_s,
            "gap_to_backends__keys": None,
            "gap_to_backends__values": None,
            "n_samples": None,
            "throttle_reasons": None,
        }
        if entry is not None:
            row.update(_host_columns(entry))
        timing = timings.get(o.case_id)
        if timing is not None:
            row.update(_timing_columns(timing))
        elif entry is not None:
            row.update(_host_as_timing(entry.host))
        rows.append(row)
    return rows


def _host_columns(e: BenchmarkEntry) -> dict:
    h = e.host
    return {
        "benchmark_name": e.name,
        "benchmark_fullname": e.fullname,
        "benchmark_group": e.group,
        "host_rounds": h.rounds,
        "host_iterations": h.iterations,
        "host_median_us": h.median_us,
        "host_mean_us": h.mean_us,
        "host_stddev_us": h.stddev_us,
        "host_min_us": h.min_us,
        "host_max_us": h.max_us,
        "host_iqr_us": h.iqr_us,
        "host_q1_us": h.q1_us,
        "host_q3_us": h.q3_us,
    }


def _host_as_timing(h: HostStats) -> dict:
    """A plain pytest-benchmark entry: its host statistics are the only timing there is."""
    return dict(
        timing_mode="host",
        n_samples=h.rounds,
        median_us=h.median_us,
        mean_us=h.mean_us,
        stddev_us=h.stddev_us,
        min_us=h.min_us,
        max_us=h.max_us,
        iqr_us=h.iqr_us,
        rel_spread=(h.iqr_us / h.median_us) if h.iqr_us is not None and h.median_us else None,
    )


def _timing_columns(t: CaseTiming) -> dict:
    cols = {name: getattr(t, name) for name in _TIMING_COLUMNS}
    cols["n_samples"] = t.n
    # Migration 012 keeps the column stored queries read: the gap where the baseline was sdpa.
    cols["gap_to_sdpa"] = t.gap_to_baseline if t.baseline_variant == "sdpa" else None
    keys = sorted(t.gap_to_backends)
    cols["gap_to_backends__keys"] = keys
    cols["gap_to_backends__values"] = [t.gap_to_backends[k] for k in keys]
    return cols


def table_rows(b: LoadedBundle) -> dict[str, pa.Table]:
    """Every child table's rows for this bundle (runs and commits are handled by ingest)."""
    run_id = b.manifest.run_id
    tables: dict[str, pa.Table] = {"results": rows_to_arrow(result_rows(b), _RESULT_TYPES)}

    case_ids: list[str] = []
    indexes: list[int] = []
    latencies: list[float] = []
    clocks: list[float | None] = []
    for case_id, values in b.samples.items():
        case_ids.extend([case_id] * len(values))
        indexes.extend(range(len(values)))
        latencies.extend(values)
        clocks.extend(b.sample_clocks.get(case_id) or [None] * len(values))
    tables["samples"] = (
        pa.table(
            {
                "run_id": pa.array([run_id] * len(case_ids), pa.string()),
                "case_id": pa.array(case_ids, pa.string()),
                "sample_index": pa.array(indexes, pa.int32()),
                "latency_us": pa.array(latencies, pa.float64()),
                "sm_clock_mhz": pa.array(clocks, pa.float64()),  # migration 013
            }
        )
        if case_ids
        else pa.table({})
    )

    tables["correctness"] = rows_to_arrow([{"run_id": run_id, **_flat(r)} for r in b.correctness], _CORRECTNESS_TYPES)
    tables["builds"] = rows_to_arrow(
        [{"run_id": run_id, **_flat(r), "config": json.dumps(r.config, sort_keys=True)} for r in b.builds],
        {"config": pa.string()},
    )
    tables["ncu_kernels"] = rows_to_arrow(
        [
            {
                "run_id": run_id,
                "case_id": k.case_id,
                "kernel_index": k.kernel_index,
                "kernel_name": k.kernel_name,
                "block_size": k.block_size,
                "grid_size": k.grid_size,
            }
            for k in b.ncu_kernels
        ]
    )
    tables["ncu_metrics"] = rows_to_arrow(
        [
            {
                "run_id": run_id,
                "case_id": k.case_id,
                "kernel_index": k.kernel_index,
                "kernel_name": k.kernel_name,
                "metric_name": name,
                "value": float(value),
            }
            for k in b.ncu_kernels
            for name, value in sorted(k.metrics.items())
        ]
    )
    tables["ncu_cases"] = rows_to_arrow([{"run_id": run_id, **_flat(c)} for c in b.ncu_cases])
    tables["variant_fingerprints"] = rows_to_arrow(  # migration 015; none for a bundle before format 4
        [
            {"run_id": run_id, "variant": name, "digest": f.digest, "code_digest": f.code, "unknown": f.unknown}
            for name, f in sorted(b.manifest.fingerprints.items())
        ],
        {"digest": pa.string(), "code_digest": pa.string(), "unknown": pa.string()},
    )
    return tables
