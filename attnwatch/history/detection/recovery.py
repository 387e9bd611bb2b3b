"""Alerts that resolve themselves: a step alert whose series came back.

An open (or acknowledged) regression or improvement alert on a series (case x GPU x pool,
metric `median_us` or `gap_to_baseline`) is resolved when the last `resolve_after` main runs of
that series, all after the step's run, are each within min_effect of the level before the step
(the alert's `baseline_value`): |value / baseline - 1| < min_effect. min_effect is the case's
own where history/analysis/case_rules.toml gives one, else the GPU's; `resolve_after` comes from
history/analysis/thresholds.toml, where its reason derives it from the measured per-run noise.

The resolution is an ordinary lifecycle transition (history.detection.alerts.resolve_in): the alert's
status, note and actor change and a 'resolved' event is appended, with a note that names the
runs and the largest deviation, in the caller's transaction. Correctness alerts are not resolved
here: a passing run after a failing one is a fix someone should confirm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from attnwatch.history.analysis.case_rules import CaseRules
from attnwatch.history.analysis.thresholds import Thresholds

ACTOR = "attnwatch detect"


@dataclass(frozen=True)
class Recovery:
    alert_id: int
    case_id: str
    metric: str
    runs: int  # runs back within min_effect (resolve_after)
    worst_pct: float  # the largest |change| among them, percent of the baseline
    min_effect: float
    note: str


def _open_step_alerts(con, gpu: str | None) -> list[tuple]:
    return con.execute(
        f"SELECT {_ALERT_COLUMNS} FROM alerts WHERE {_OPEN_STEP} AND (? IS NULL OR gpu_name = ?) ORDER BY alert_id",
        [gpu, gpu],
    ).fetchall()


_ALERT_COLUMNS = "alert_id, case_id, gpu_name, pool, metric, run_id, baseline_value"
_OPEN_STEP = (
    "status IN ('open', 'acknowledged') AND kind IN ('regression', 'improvement') "
    "AND metric IN ('median_us', 'gap_to_baseline') AND baseline_value > 0 AND run_id IS NOT NULL"
)

# For every open step alert at once (`case_series` numbers all of main's results of the cases
# asked for; a query per alert would do that once per alert): the last $3 runs of its series
# after its step's run, oldest first. $1, $2: the GPU filter. An alert whose run is
# no longer in its series gets no rows (nothing is decided).
_RUNS_AFTER_SQL = f"""
    WITH a AS (SELECT {_ALERT_COLUMNS} FROM alerts WHERE {_OPEN_STEP} AND ($1 IS NULL OR gpu_name = $2)),
         s AS (SELECT case_id, series_gpu, series_pool, series_index, run_id, median_us, gap_to_baseline
               FROM case_series WHERE case_id IN (SELECT case_id FROM a)),
         joined AS (SELECT a.alert_id, a.run_id AS step_run, a.metric, s.*
                    FROM a JOIN s ON s.case_id = a.case_id AND s.series_gpu IS NOT DISTINCT FROM a.gpu_name
                                 AND s.series_pool IS NOT DISTINCT FROM a.pool),
         step AS (SELECT alert_id, min(series_index) AS step_index FROM joined WHERE run_id = step_run GROUP BY alert_id),
         after AS (SELECT j.alert_id, j.run_id, j.series_index,
                          CASE WHEN j.metric = 'median_us' THEN j.median_us ELSE j.gap_to_baseline END AS value,
                          row_number() OVER (PARTITION BY j.alert_id ORDER BY j.series_index DESC) AS back
                   FROM joined j JOIN step USING (alert_id) WHERE j.series_index > step.step_index)
    SELECT alert_id, run_id, value FROM after WHERE back <= $3 ORDER BY alert_id, series_index
"""


def find_recoveries(
    con, thresholds_for: Callable[[str | None], Thresholds], rules: CaseRules = CaseRules(), only_gpu: str | None = None
) -> list[Recovery]:
    """Every open step alert (on `only_gpu`, if given) whose series has been back within
    min_effect for resolve_after runs (read-only on `con`)."""
    alerts = _open_step_alerts(con, only_gpu)
    if not alerts:
        return []
    thresholds = {gpu: thresholds_for(gpu) for gpu in {a[2] for a in alerts}}
    after: dict[int, list[tuple[str, float | None]]] = {}
    limit = max(th.resolve_after for th in thresholds.values())
    for alert_id, run, value in con.execute(_RUNS_AFTER_SQL, [only_gpu, only_gpu, limit]).fetchall():
        after.setdefault(alert_id, []).append((run, value))
    out = []
    for alert_id, case_id, gpu, _pool, metric, _run_id, baseline in alerts:
        th = thresholds[gpu]
        effect = rules.min_effect(case_id, gpu, th.min_effect)
        runs = after.get(alert_id, [])[-th.resolve_after :]
        if len(runs) < th.resolve_after:
            continue
        values = [v for _, v in runs]
        if any(v is None or not math.isfinite(v) or v <= 0 for v in values):
            continue
        changes = [v / baseline - 1.0 for v in values]
        if max(abs(c) for c in changes) >= effect:
            continue
        worst = max(changes, key=abs) * 100.0
        note = (
            f"resolved automatically: the last {len(runs)} main runs ({runs[0][0]} .. {runs[-1][0]}) are within "
            f"±{effect:.1%} of the level before the step ({baseline:.4g}); largest deviation {worst:+.2f}%"
        )
        out.append(Recovery(alert_id, case_id, metric, len(runs), worst, effect, note))
    return out
