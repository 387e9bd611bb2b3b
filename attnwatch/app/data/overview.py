"""The Overview page's data: one GPU's latest main run, every case, its change against the main
run before it, its recent trend, what the harness stored about its quality, and alerts.

`pool` narrows each query to one pool of that GPU model (a host, unless runners declared shared
pools: history.contract.series_key): the latest run and the sparklines of one host are not mixed with
another host's. None means every pool."""

from __future__ import annotations

import pandas as pd

from attnwatch.app.data import compare, push
from attnwatch.app.data.runs import main_run_before
from attnwatch.app.data.store import Source, cached_query, read_frame
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.store.settings import DEFAULT_BRANCH_SQL
from attnwatch.history.contract.series_key import series_order, series_position

# How many recent main runs the sparkline covers.
SPARKLINE_RUNS = 20
# The verdicts the Overview counts, by This push's section (app.data.push.SECTIONS) and by the
# Compare page's shown verdict (compare.shown_verdicts): one name per change a reader acts on.
REGRESSION, IMPROVEMENT, MOVED = "regression", "improvement", compare.MOVED_NO_INTERVAL
_FROM_PUSH = {"regression": REGRESSION, "improvement": IMPROVEMENT, "no interval": MOVED}


@cached_query
def gpu_summary(source: Source) -> pd.DataFrame:
    """One row per device (GPU model, or `cpu`/`host` for runs without a GPU) and host (pool):
    its latest complete main run, case counts by outcome, and the cases with open alerts by kind
    (a case is counted once, however many of its metrics alerted: latency and gap to baseline move
    together; regressions and improvements are different news)."""
    return read_frame(
        source,
        """
        WITH latest AS (SELECT * FROM latest_main_runs),
        counts AS (  -- run_summaries' counts, for these runs only: that view counts every run's results
            SELECT run_id,
                   count(case_id) AS cases,
                   count(case_id) FILTER (WHERE status = 'ok') AS cases_ok,
                   count(case_id) FILTER (WHERE status = 'failed') AS cases_failed,
                   count(case_id) FILTER (WHERE status IN ('crashed', 'timeout')) AS cases_crashed,
                   count(case_id) FILTER (WHERE status IN ('skipped', 'unsupported')) AS cases_skipped
            FROM results WHERE run_id IN (SELECT run_id FROM latest) GROUP BY 1
        ),
        open_alerts AS (
            SELECT series_gpu AS gpu, series_pool AS pool,
                   count(DISTINCT case_id) FILTER (WHERE kind = 'regression') AS open_regressions,
                   count(DISTINCT case_id) FILTER (WHERE kind = 'improvement') AS open_improvements,
                   count(DISTINCT case_id) FILTER (WHERE kind = 'correctness') AS open_correctness
            FROM series_alerts WHERE status = 'open' GROUP BY 1, 2
        )
        SELECT l.series_gpu AS device, l.series_pool AS host, l.run_id, l.commit_sha, l.started_at,
               l.synthetic, coalesce(s.cases, 0) AS cases, coalesce(s.cases_ok, 0) AS cases_ok,
               coalesce(s.cases_failed, 0) AS cases_failed, coalesce(s.cases_crashed, 0) AS cases_crashed,
               coalesce(s.cases_skipped, 0) AS cases_skipped,
               coalesce(o.open_regressions, 0) AS open_regressions, coalesce(o.open_improvements, 0) AS open_improvements,
               coalesce(o.open_correctness, 0) AS open_correctness
        FROM latest l LEFT JOIN counts s USING (run_id)
        LEFT JOIN open_alerts o ON o.gpu = l.series_gpu AND o.pool IS NOT DISTINCT FROM l.series_pool
        ORDER BY device, host
        """,
    )


@cached_query
def newest_main_run_any_status(source: Source, gpu: str, pool: str | None = None) -> pd.DataFrame:
    """The newest main run on `gpu` whatever its status: a failed or partial one gets a notice."""
    return read_frame(
        source,
        f"""
        SELECT run_id, status, started_at, commit_sha FROM series_runs
        WHERE branch = {DEFAULT_BRANCH_SQL} AND series_gpu = ? AND (?::VARCHAR IS NULL OR series_pool = ?)
        ORDER BY started_at DESC, run_id DESC LIMIT 1
        """,
        [gpu, pool, pool],
    )


@cached_query
def latest_cases(
    source: Source, run_id: str, gpu: str, spark_runs: int = SPARKLINE_RUNS, pool: str | None = None
) -> pd.DataFrame:
    """Every case of `run_id` with its stored figures, correctness over seeds (NULL: not
    checked), its change against the main run before it (`runs.main_run_before`), the median
    latency of the last `spark_runs` main runs on the same GPU up to this one, in series order
    (history.contract.series_key: as Trends and detection draw them; `trend_rel` is the
    same divided by its median, so every row's sparkline shares one scale), its open alerts by
    kind and the harness's quality columns."""
    previous = main_run_before(source, run_id) or ""
    return read_frame(
        source,
        f"""
        WITH recent AS (
            SELECT run_id, series_at, started_at FROM series_runs
            WHERE branch = {DEFAULT_BRANCH_SQL} AND series_gpu = ? AND (?::VARCHAR IS NULL OR series_pool = ?)
              AND {series_position()} <= (SELECT {series_position()} FROM series_runs WHERE run_id = ?)
            ORDER BY {series_order(descending=True)} LIMIT ?
        ),
        recent_ok AS (
            SELECT r.case_id, r.median_us, recent.series_at, recent.started_at, recent.run_id
            FROM results r JOIN recent USING (run_id)
            WHERE r.status = 'ok' AND r.median_us IS NOT NULL
        ),
        trend_median AS (SELECT case_id, median(median_us) AS m FROM recent_ok GROUP BY case_id),
        trend AS (
            SELECT case_id, list(median_us ORDER BY {series_order()}) AS trend_us,
                   list(median_us / m ORDER BY {series_order()}) AS trend_rel
            FROM recent_ok JOIN trend_median USING (case_id)
            GROUP BY case_id
        ),
        open_alerts AS (
            SELECT case_id, count(*) FILTER (WHERE kind = 'regression') AS open_regressions,
                   count(*) FILTER (WHERE kind = 'improvement') AS open_improvements
            FROM series_alerts
            WHERE status = 'open' AND series_gpu = ? AND (?::VARCHAR IS NULL OR series_pool = ?)
            GROUP BY case_id
        ),
        prev AS (SELECT case_id, median_us FROM results WHERE run_id = ? AND status = 'ok')
        SELECT res.operator, res.variant, res.shape_id, res.dtype, res.causal, res.status,
               res.median_us, (res.median_us / prev.median_us - 1) * 100 AS change_pct, res.graph_median_us,
               res.us_per_head, res.tflops, res.bytes, res.gap_to_baseline, res.baseline_variant,
               res.gap_to_fastest_reference, res.fastest_reference,
               cs.passed AS correct, cs.seeds AS correctness_seeds, cs.worst_rel_err,
               trend.trend_rel, trend.trend_us,
               coalesce(open_alerts.open_regressions, 0) AS open_regressions,
               coalesce(open_alerts.open_improvements, 0) AS open_improvements,
               res.rel_spread, res.converged, res.throttled_samples, res.throttle_reasons, res.n_samples, res.timing_mode,
               res.error, res.case_id
        FROM results res
        LEFT JOIN correctness_summaries cs ON cs.run_id = res.run_id AND cs.case_id = res.case_id
        LEFT JOIN trend ON trend.case_id = res.case_id
        LEFT JOIN open_alerts ON open_alerts.case_id = res.case_id
        LEFT JOIN prev ON prev.case_id = res.case_id
        WHERE res.run_id = ?
        ORDER BY res.operator, res.shape_id, res.dtype, res.causal, res.variant
        """,
        [gpu, pool, pool, run_id, int(spark_runs), gpu, pool, pool, previous, run_id],
    )


@cached_query
def open_alerts_for_gpu(source: Source, gpu: str, limit: int = 200, pool: str | None = None) -> pd.DataFrame:
    """Open alerts on one GPU (and pool), newest first."""
    return read_frame(
        source,
        """
        SELECT a.alert_id, a.kind, a.metric, a.case_id, a.change_pct, a.baseline_value, a.new_value,
               a.commit_sha, a.run_id, a.created_at, a.detail
        FROM series_alerts a
        WHERE a.status = 'open' AND a.series_gpu = ? AND (?::VARCHAR IS NULL OR a.series_pool = ?)
        ORDER BY a.created_at DESC, a.alert_id DESC LIMIT ?
        """,
        [gpu, pool, pool, int(limit)],
    )


def run_verdicts(source: Source, run_id: str, gpu: str) -> tuple[pd.DataFrame, bool]:
    """Each case of `run_id` against the main run before it: `verdict` (REGRESSION, IMPROVEMENT,
    MOVED or None). Where `run_id` is the run This push compares (the newest main run of its
    GPU and pool) the verdicts are This push's own rows (push.push_changes), so the two pages
    cannot disagree; for an older run (the newest main run did not complete) they come from the
    Compare page's code over the same pair (compare.compare_runs, compare.shown_verdicts).
    Returns (case_id, verdict) rows and whether they are This push's."""
    changes = push.push_changes(source)
    mine = changes[changes["head_run"] == run_id] if "head_run" in changes.columns else changes.iloc[0:0]
    if not mine.empty:
        return pd.DataFrame({"case_id": mine["case_id"], "verdict": mine["section"].map(_FROM_PUSH)}), True
    before = main_run_before(source, run_id)
    if before is None:
        return pd.DataFrame(columns=["case_id", "verdict"]), False
    judged = compare.shown_verdicts(compare.compare_runs(source, before, run_id, gpu), load_thresholds(gpu).min_effect)
    counted = judged["shown"].where(judged["shown"].isin([REGRESSION, IMPROVEMENT, MOVED]))
    return pd.DataFrame({"case_id": judged["case_id"], "verdict": counted}), False
