"""Runs, GPUs and the shape of the history: what every page needs before it draws anything."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from attnwatch.app.data.store import Source, cached_query, read_frame, read_frames
from attnwatch.history.store.settings import DEFAULT_BRANCH_SQL

# A run is identified to people by its commit and time; these columns of `series_runs` (or
# `latest_main_runs`: migration 010) describe it everywhere.
RUN_COLUMNS = """
    r.run_id, r.commit_sha, r.branch, r.pr_number, r.trigger, r.status, r.started_at,
    r.series_gpu AS gpu, r.runner, r.synthetic, r.dirty, r.commit_message, r.committed_at AS commit_date
"""


@dataclass(frozen=True)
class HistoryShape:
    """How much history there is: decides the empty / single-run / synthetic notices."""

    runs: int
    synthetic_runs: int
    results: int
    gpus: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return self.runs == 0


@cached_query
def history_shape(source: Source) -> HistoryShape:
    """Counts of runs and results, and the GPUs measured; an unmigrated file counts as empty."""
    if not source.exists:
        return HistoryShape(0, 0, 0, ())

    def body(query) -> HistoryShape:  # one connection: every page asks this first, cold
        tables = query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'")
        if not {"runs", "results"} <= set(tables["table_name"]):
            return HistoryShape(0, 0, 0, ())
        counts = query(
            """
            SELECT (SELECT count(*) FROM series_runs) AS runs,
                   (SELECT count(*) FROM series_runs WHERE synthetic) AS synthetic_runs,
                   (SELECT count(*) FROM results) AS results
            """,
        ).iloc[0]
        gpus = query("SELECT series_gpu AS gpu, count(*) AS n FROM series_runs GROUP BY 1 ORDER BY n DESC, gpu")
        return HistoryShape(
            int(counts["runs"]), int(counts["synthetic_runs"]), int(counts["results"]), tuple(gpus["gpu"])
        )

    return read_frames(source, body)


@cached_query
def gpu_pools(source: Source, gpu: str) -> list[str]:
    """The pools (hosts, unless runners declared shared pools: history.contract.series_key) that ran on
    `gpu`, most runs first: each is a series of its own."""
    frame = read_frame(
        source,
        "SELECT series_pool AS pool FROM series_runs WHERE series_gpu = ? AND series_pool IS NOT NULL "
        "GROUP BY 1 ORDER BY count(*) DESC, 1",
        [gpu],
    )
    return [str(p) for p in frame["pool"]]


@cached_query
def latest_main_run(source: Source, gpu: str, pool: str | None = None) -> pd.DataFrame:
    """The newest main-branch run on `gpu` in `pool` (every pool's when None; empty when none)."""
    return read_frame(
        source,
        f"""
        SELECT {RUN_COLUMNS} FROM latest_main_runs r
        WHERE r.series_gpu = ? AND (?::VARCHAR IS NULL OR r.series_pool = ?)
        ORDER BY r.started_at DESC
        """,
        [gpu, pool, pool],
    )


@cached_query
def recent_runs(source: Source, gpu: str | None = None, limit: int = 500) -> pd.DataFrame:
    """Newest runs first (all branches), for run and commit pickers."""
    where = "WHERE r.series_gpu = ?" if gpu else ""
    params = [gpu] if gpu else []
    return read_frame(
        source,
        f"""
        SELECT {RUN_COLUMNS} FROM series_runs r
        {where} ORDER BY r.started_at DESC LIMIT {int(limit)}
        """,
        params,
    )


@cached_query
def find_runs(source: Source, text: str, gpu: str | None = None, limit: int = 100) -> pd.DataFrame:
    """Runs whose id, commit (prefix), branch or PR number matches `text`, newest first: pickers
    search the whole history instead of listing only the newest few hundred runs."""
    needle = text.strip()
    if not needle:
        return recent_runs(source, gpu, limit)
    gpu_clause = "AND r.series_gpu = ?" if gpu else ""
    return read_frame(
        source,
        f"""
        SELECT {RUN_COLUMNS} FROM series_runs r
        WHERE (contains(lower(r.run_id), lower(?)) OR starts_with(lower(coalesce(r.commit_sha, '')), lower(?))
               OR contains(lower(coalesce(r.branch, '')), lower(?)) OR CAST(r.pr_number AS VARCHAR) = ?)
        {gpu_clause}
        ORDER BY r.started_at DESC, r.run_id DESC LIMIT {int(limit)}
        """,
        [needle, needle, needle, needle.lstrip("#"), *([gpu] if gpu else [])],
    )


@cached_query
def runs_by_id(source: Source, run_ids: tuple[str, ...]) -> pd.DataFrame:
    """The named runs (those that exist), for pickers that must keep a run a link names."""
    return read_frame(
        source,
        f"SELECT {RUN_COLUMNS} FROM series_runs r WHERE list_contains(?, r.run_id)",
        [list(run_ids)],
    )


@cached_query
def default_branch(source: Source) -> str:
    """The history's default branch (history.store.settings): what "main" means on every page."""
    return str(read_frame(source, f"SELECT {DEFAULT_BRANCH_SQL} AS branch")["branch"].iloc[0])


@cached_query
def main_run_before(source: Source, run_id: str) -> str | None:
    """The newest main run on the same GPU and pool (host: history.contract.series_key) that started before
    `run_id` and did not fail outright (complete or partial): what "the run before it" means on
    every page."""
    frame = read_frame(
        source,
        f"""
        SELECT b.run_id FROM series_runs h JOIN series_runs b
          ON b.series_gpu = h.series_gpu AND b.series_pool IS NOT DISTINCT FROM h.series_pool
         AND b.branch = {DEFAULT_BRANCH_SQL} AND b.status <> 'failed' AND b.run_id <> h.run_id
         AND (b.started_at < h.started_at OR (b.started_at = h.started_at AND b.run_id < h.run_id))
        WHERE h.run_id = ?
        ORDER BY b.started_at DESC, b.run_id DESC LIMIT 1
        """,
        [run_id],
    )
    return None if frame.empty else str(frame["run_id"].iloc[0])


@cached_query
def newest_run_of_commit(source: Source, sha: str, gpu: str) -> pd.DataFrame:
    """The newest run of the commit `sha` (full or prefix) on `gpu` (empty if none)."""
    return read_frame(
        source,
        f"""
        SELECT {RUN_COLUMNS} FROM series_runs r
        WHERE starts_with(r.commit_sha, ?) AND r.series_gpu = ?
        ORDER BY r.started_at DESC, r.run_id DESC LIMIT 1
        """,
        [sha.strip().lower(), gpu],
    )


@cached_query
def run_header(source: Source, run_id: str) -> pd.DataFrame:
    """Every stored column of one run (manifest and environment) plus its commit."""
    return read_frame(
        source,
        """
        SELECT r.* EXCLUDE (committed_at, series_gpu, series_pool, series_at), r.committed_at AS commit_date
        FROM series_runs r WHERE r.run_id = ?
        """,
        [run_id],
    )


@cached_query
def run_results(source: Source, run_id: str) -> pd.DataFrame:
    """One row per case of a run: timing as stored, the case's status and its correctness over seeds."""
    return read_frame(
        source,
        """
        WITH corr AS (
            SELECT case_id, passed AS correct, seeds, worst_max_abs_err AS max_abs_err,
                   worst_rel_err AS rel_err
            FROM correctness_summaries WHERE run_id = ?
        )
        SELECT res.case_id, res.operator, res.variant, res.shape_id, res.dtype, res.causal, res.status,
               res.median_us, res.p10_us, res.p90_us, res.us_per_head, res.tflops, res.gap_to_baseline,
               res.baseline_variant, res.gap_to_fastest_reference, res.fastest_reference, res.graph_median_us,
               res.n_samples, res.rel_spread, res.converged, res.throttled_samples, res.throttle_reasons,
               res.timing_mode, res.timing_recipe, res.clock_normalised_median_us, res.band_discarded_samples,
               res.pacing_gap_s, corr.correct, corr.seeds, corr.max_abs_err, corr.rel_err, res.error
        FROM results res LEFT JOIN corr USING (case_id)
        WHERE res.run_id = ?
        ORDER BY res.operator, res.shape_id, res.dtype, res.causal, res.variant
        """,
        [run_id, run_id],
    )
