"""The Trends page's data: one metric over runs for chosen cases on one GPU and branch.

`pool` narrows to one pool of that GPU (a host, unless runners declared shared pools:
history.contract.series_key); with None every pool is drawn and each is a series of its own (its name
ends the series label), so two hosts never interleave into one line.

Aggregation happens in DuckDB and the number of runs plotted is capped (`max_runs`, newest
first), so a history of a million results draws as fast as one of a hundred.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from attnwatch.app.data.store import Source, cached_query, read_frame, read_frames
from attnwatch.history.store.settings import DEFAULT_BRANCH_SQL
from attnwatch.history.contract.series_key import SERIES_ORDER, series_order
from attnwatch.history.analysis.attribution import ENVIRONMENT_FIELDS, environment_epochs as epochs_of
from attnwatch.toml_reader import read_toml

# The runs' environment fields the charts mark changes of (history.analysis.attribution; runs
# columns; the timing recipe is each result's own, read with it).
RUN_ENVIRONMENT = tuple(f for f in ENVIRONMENT_FIELDS if f != "timing_recipe")


@dataclass(frozen=True)
class Metric:
    """A plottable column: where it is stored, its band columns (if any) and its unit."""

    label: str
    table: str  # a key of JOINS: where the column is read
    column: str
    p10: str | None = None
    p90: str | None = None
    higher_is_better: bool = False
    ok_only: bool = True  # only cases that timed fine; a correctness check ran before timing, whatever followed
    timed: bool = False  # derived from the run's stored timer (results.timing_mode): the axis names it


# Where a metric's column lives (alias, join onto results r). Correctness: the worst of a case's
# seeds in a run (the correctness_summaries view, migrations 001 and 005).
JOINS = {
    "results": ("r", ""),
    "ncu_cases": ("n", "JOIN ncu_cases n ON n.run_id = r.run_id AND n.case_id = r.case_id"),
    "correctness": ("k", "JOIN correctness_summaries k ON k.run_id = r.run_id AND k.case_id = r.case_id"),
}


# Every metric is read as stored by CI; none is recomputed here. A `timed` metric's label names no
# timer: the page adds the one the plotted rows stored (CUDA events, or a CPU/host wall clock).
METRICS: dict[str, Metric] = {
    m.label: m
    for m in (
        Metric("median latency (µs)", "results", "median_us", "p10_us", "p90_us", timed=True),
        Metric("µs per head", "results", "us_per_head", timed=True),
        Metric("TFLOPS (from the median)", "results", "tflops", higher_is_better=True, timed=True),
        Metric(
            "gap to baseline (× the operator's baseline latency, same timer)", "results", "gap_to_baseline", timed=True
        ),
        Metric("gap to fastest reference (same timer)", "results", "gap_to_fastest_reference", timed=True),
        Metric("CUDA-graph replay latency (µs)", "results", "graph_median_us"),
        Metric("ncu: kernel duration (µs)", "ncu_cases", "duration_us"),
        Metric("ncu: SM throughput (%)", "ncu_cases", "sm_throughput_pct", higher_is_better=True),
        Metric("ncu: DRAM throughput (%)", "ncu_cases", "dram_throughput_pct"),
        Metric("ncu: DRAM bytes", "ncu_cases", "dram_bytes"),
        Metric("ncu: achieved occupancy (%)", "ncu_cases", "achieved_occupancy_pct", higher_is_better=True),
        Metric("ncu: tensor pipe (%)", "ncu_cases", "tensor_pipe_pct", higher_is_better=True),
        Metric("ncu: L2 hit rate (%)", "ncu_cases", "l2_hit_rate_pct", higher_is_better=True),
        Metric("ncu: registers per thread", "ncu_cases", "registers_per_thread"),
        Metric("ncu: local memory (spill) bytes", "ncu_cases", "local_memory_bytes"),
        Metric("ncu: achieved TFLOPS", "ncu_cases", "achieved_tflops", higher_is_better=True),
        Metric("correctness: max abs error", "correctness", "worst_max_abs_err", ok_only=False),
        Metric("correctness: relative error", "correctness", "worst_rel_err", ok_only=False),
        Metric("correctness: tolerance used (1 = fails)", "correctness", "worst_tolerance_used", ok_only=False),
    )
}

METRIC_BY_COLUMN: dict[str, str] = {m.column: label for label, m in METRICS.items()}
# A link written before migration 012 names the column by its old name: it opens the metric now.
METRIC_ALIASES = {"gap_to_sdpa": "gap_to_baseline", "gap_to_fastest_backend": "gap_to_fastest_reference"}

SERIES_LABEL = (
    "r.variant || ' · ' || coalesce(r.shape_id, '?') || ' · ' || coalesce(r.dtype, '?')"
    " || CASE WHEN r.causal THEN ' · causal' ELSE '' END"
)


def series_label(pool: str | None, pool_column: str) -> str:
    """SERIES_LABEL, with the series' pool (`pool_column`) appended when every pool is drawn (`pool` None)."""
    return SERIES_LABEL if pool is not None else f"{SERIES_LABEL} || ' · ' || {pool_column}"


@cached_query
def trend_options(source: Source) -> dict[str, list]:
    """Distinct GPUs, branches, variants, shapes and dtypes present. The results table is read
    once, grouped by (variant, shape, dtype): three scans of its million rows cost 3x one."""

    def body(query):
        gpus = query("SELECT series_gpu FROM series_runs GROUP BY 1 ORDER BY count(*) DESC")
        branches = query(
            f"SELECT branch FROM series_runs WHERE branch IS NOT NULL GROUP BY 1 "
            f"ORDER BY (branch = {DEFAULT_BRANCH_SQL}) DESC, count(*) DESC LIMIT 200"
        )
        return gpus, branches, query("SELECT variant, shape_id, dtype, count(*) AS n FROM results GROUP BY ALL")

    gpus, branches, cases = read_frames(source, body)
    shapes = cases[cases["shape_id"].notna()].groupby("shape_id")["n"].sum().reset_index()
    return {
        "gpus": gpus.iloc[:, 0].tolist(),
        "branches": branches.iloc[:, 0].tolist(),
        "variants": _sorted_distinct(cases["variant"]),
        # Most-measured shape first: the natural default for a trend.
        "shapes": shapes.sort_values(["n", "shape_id"], ascending=[False, True], kind="stable")["shape_id"].tolist(),
        "dtypes": _sorted_distinct(cases["dtype"].dropna()),
    }


def _sorted_distinct(values: pd.Series) -> list:
    """As SQL's `SELECT DISTINCT ... ORDER BY 1`: ascending, a NULL last."""
    present = sorted(set(values.dropna()))
    return present + ([None] if values.isna().any() else [])


def _value_sql(metric: Metric) -> tuple[str, str, str, str]:
    """(value, p10, p90, join) SQL fragments for a metric; column names come from METRICS only."""
    alias, join = JOINS[metric.table]
    p10 = f"{alias}.{metric.p10}" if metric.p10 else "NULL::DOUBLE"
    p90 = f"{alias}.{metric.p90}" if metric.p90 else "NULL::DOUBLE"
    return f"{alias}.{metric.column}", p10, p90, join


@cached_query
def trend_series(
    source: Source,
    metric_label: str,
    gpu: str,
    branch: str,
    variants: tuple[str, ...],
    shapes: tuple[str, ...],
    dtype: str,
    causal: bool,
    max_runs: int = 200,
    pool: str | None = None,
) -> pd.DataFrame:
    """The metric per series (variant · shape · dtype) over the newest `max_runs` runs in series
    order (history.contract.series_key: as detection's `case_series`), oldest first.

    Also returned per point: the run's place on the commit axis (`x`, `x_order`), the launch
    configuration the kernel ran with and how it was chosen (kernel_config, _source; NULL when
    the variant reports none), what the harness stored about the number's quality (converged, rel_spread, throttled_samples,
    throttle_reasons, graph_median_us, median_us: app.data.quality marks them), and how its samples were
    taken (timing_recipe, clock_normalised_median_us, band_discarded_samples, pacing_gap_s; NULL before migration 013). Failed or skipped cases have no
    value and are left out (the chart shows a gap there); a correctness metric is kept for every
    case that was checked, whatever its timing did.
    """
    metric = METRICS[metric_label]
    value, p10, p90, join = _value_sql(metric)
    status = "r.status = 'ok' AND " if metric.ok_only else ""
    frame = read_frame(
        source,
        f"""
        WITH picked AS (
            SELECT run_id, started_at, series_at, commit_sha, series_pool AS pool, commit_message, committed_at,
                   {", ".join(RUN_ENVIRONMENT)}
            FROM series_runs
            WHERE series_gpu = ? AND branch = ? AND (?::VARCHAR IS NULL OR series_pool = ?)
            ORDER BY {series_order(descending=True)} LIMIT ?
        )
        SELECT {series_label(pool, "p.pool")} AS series, r.variant, r.shape_id, r.case_id, p.started_at, p.series_at,
               p.pool, {value} AS value, {p10} AS p10, {p90} AS p90, p.run_id, p.commit_sha,
               p.commit_message, p.committed_at AS commit_date,
               r.median_us, r.converged, r.rel_spread, r.throttled_samples, r.n_samples, r.graph_median_us,
               r.timing_mode, r.kernel_config, r.kernel_config_source, r.throttle_reasons,
               r.timing_recipe, r.clock_normalised_median_us, r.band_discarded_samples, r.pacing_gap_s,
               {", ".join("p." + c for c in RUN_ENVIRONMENT)}
        FROM results r JOIN picked p USING (run_id) {join}
        WHERE {status}{value} IS NOT NULL
          AND list_contains(?, r.variant) AND list_contains(?, r.shape_id)
          AND r.dtype = ? AND r.causal = ?
        ORDER BY {series_order("p")}, series
        """,
        [gpu, branch, pool, pool, int(max_runs), list(variants), list(shapes), dtype, bool(causal)],
    )
    return with_commit_axis(frame)


def with_commit_axis(frame: pd.DataFrame) -> pd.DataFrame:
    """Add `x` (the commit's short sha; a commit measured more than once on one pool gets `sha·2`,
    `sha·3` for its later runs there) and `x_order` (0.. in commit order), so the x axis is
    commits, not time, and the runs of one commit on different hosts share their place. The runs
    are taken in series order (history.contract.series_key.SERIES_ORDER: the frame carries its columns)."""
    if frame.empty:
        return frame.assign(x=pd.Series(dtype=object), x_order=pd.Series(dtype="int64"))
    columns = list(dict.fromkeys(["commit_sha", *SERIES_ORDER])) + (["pool"] if "pool" in frame else [])
    runs = frame.drop_duplicates("run_id")[columns].sort_values(list(SERIES_ORDER))
    short = runs["commit_sha"].fillna("?").str.slice(0, 7)
    keys = [runs["pool"].fillna(""), short] if "pool" in runs else [short]
    repeat = short.groupby(keys).cumcount()
    runs = runs.assign(x=[s if k == 0 else f"{s}·{k + 1}" for s, k in zip(short, repeat)])
    order = {x: i for i, x in enumerate(dict.fromkeys(runs["x"]))}
    runs = runs.assign(x_order=runs["x"].map(order))
    return frame.merge(runs[["run_id", "x", "x_order"]], on="run_id", how="left")


def normalise(series: pd.DataFrame, base_commit: str | None) -> pd.DataFrame:
    """Each series divided by its value at the run of `base_commit` (full sha or prefix), or at
    its first point when that commit is not plotted; value, p10 and p90 alike."""
    out = series.copy()
    for _series, group in out.groupby("series", sort=False):
        group = group.sort_values("x_order")
        at_base = group[group["commit_sha"].fillna("").str.startswith(base_commit)] if base_commit else group.iloc[:0]
        reference = (at_base if not at_base.empty else group)["value"].iloc[0]
        if reference:
            out.loc[group.index, ["value", "p10", "p90"]] = group[["value", "p10", "p90"]] / reference
    return out


@cached_query
def trend_alerts(
    source: Source, metric_label: str, gpu: str, case_ids: tuple[str, ...], pool: str | None = None
) -> pd.DataFrame:
    """Alerts (detection's change points and correctness failures) on the plotted cases,
    placed at their run with the plotted metric's value there."""
    metric = METRICS[metric_label]
    value, _, _, join = _value_sql(metric)
    return read_frame(
        source,
        f"""
        SELECT {series_label(pool, "a.series_pool")} AS series, a.run_started_at AS started_at, {value} AS value,
               a.kind, a.status, a.alert_id, a.run_id, a.metric, a.change_pct,
               a.kind || ' #' || a.alert_id || ' (' || a.status || ') on ' || a.metric
                 || coalesce(': ' || printf('%+.1f%%', a.change_pct), '')
                 || coalesce('; moved: ' || a.attribution, '') AS label
        FROM series_alerts a
        JOIN results r ON r.run_id = a.run_id AND r.case_id = a.case_id {join}
        WHERE a.series_gpu = ? AND list_contains(?, a.case_id)
          AND (?::VARCHAR IS NULL OR a.series_pool = ?)
          AND {value} IS NOT NULL
        ORDER BY a.run_started_at
        """,
        [gpu, list(case_ids), pool, pool],
    )


AXIS_FILE = Path(__file__).resolve().parent / "number_marks.toml"


@lru_cache(maxsize=2)
def log_ratio(path: Path = AXIS_FILE) -> float:
    """The spread of plotted values (largest over smallest) from which Trends opens on a log axis
    (number_marks.toml [trend_axis], with its reason)."""
    try:
        table = read_toml(path, "number marks", ValueError)["trend_axis"]
        value = float(table["log_when_max_over_min"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: trend_axis.log_when_max_over_min: {exc}") from None
    if not table.get("log_when_max_over_min_reason") or value <= 1:
        raise ValueError(f"{path}: trend_axis.log_when_max_over_min: needs a value over 1 and its reason")
    return value


def wide_range(values: pd.Series) -> bool:
    """Whether the plotted values spread so far (largest / smallest positive value at least
    `log_ratio`) that a linear axis would flatten the fast series onto its floor."""
    positive = pd.to_numeric(values, errors="coerce")
    positive = positive[positive > 0]
    return bool(not positive.empty and positive.max() / positive.min() >= log_ratio())


@cached_query
def runs_back_to_alerts(
    source: Source,
    gpu: str,
    branch: str,
    variants: tuple[str, ...],
    shapes: tuple[str, ...],
    dtype: str,
    causal: bool,
    pool: str | None = None,
) -> int | None:
    """How many of the newest runs (as trend_series counts them) reach back to the oldest alert
    on these cases, so the default window includes every alert listed under the chart; None
    without an alert in this series. Cases are matched by their id's parts (variant/shape/dtype/mode)."""
    frame = read_frame(
        source,
        f"""
        WITH picked AS (
            SELECT run_id, row_number() OVER (ORDER BY {series_order(descending=True)}) AS back
            FROM series_runs WHERE series_gpu = ? AND branch = ? AND (?::VARCHAR IS NULL OR series_pool = ?)
        )
        SELECT max(p.back) AS back FROM series_alerts a JOIN picked p USING (run_id)
        WHERE a.series_gpu = ? AND (?::VARCHAR IS NULL OR a.series_pool = ?)
          AND list_contains(?, split_part(a.case_id, '/', 1)) AND list_contains(?, split_part(a.case_id, '/', 2))
          AND split_part(a.case_id, '/', 3) = ? AND split_part(a.case_id, '/', 4) = ?
        """,
        [
            gpu,
            branch,
            pool,
            pool,
            gpu,
            pool,
            pool,
            list(variants),
            list(shapes),
            dtype,
            "causal" if causal else "noncausal",
        ],
    )
    back = frame["back"].iloc[0] if not frame.empty else None
    return None if back is None or pd.isna(back) else int(back)


def environment_epochs(frame: pd.DataFrame) -> pd.DataFrame:
    """The runs at which the environment changed (history.analysis.attribution.environment_epochs:
    driver, CUDA, torch, Triton, cuDNN, cuBLAS, ..., timing recipe, harness), per pool where the
    frame has several: columns x, run_id, label ("torch 2.11.0 → 2.12.0; ...")."""
    present = [c for c in ENVIRONMENT_FIELDS if c in frame]
    if frame.empty or not present or "run_id" not in frame:
        return pd.DataFrame(columns=["x", "run_id", "label"])
    keep = ["run_id", "x", "x_order", *present, *(["pool"] if "pool" in frame else [])]
    runs = frame[keep].sort_values("x_order", kind="stable").drop_duplicates("run_id")  # only what is read
    pools = runs.groupby(runs["pool"].fillna(""), sort=False) if "pool" in runs else [("", runs)]
    rows = []
    for pool, group in pools:
        records = [
            {"run_id": r["run_id"], **{c: None if pd.isna(r[c]) else r[c] for c in present}}
            for r in group.to_dict("records")
        ]
        xs = dict(zip(group["run_id"], group["x"]))
        prefix = f"{pool}: " if pool and len(pools) > 1 else ""
        rows += [
            (xs[run_id], run_id, prefix + "; ".join(c.text() for c in changes))
            for run_id, changes in epochs_of(records)
        ]
    return pd.DataFrame(rows, columns=["x", "run_id", "label"])
